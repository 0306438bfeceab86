"""Configuration history through the services (tenancy/records/history.py)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404
from guardian.shortcuts import assign_perm

from agents.services import agent_delete, agent_save, crew_save, use_grant
from providers.services import connection_save
from rag.services import knowledge_base_save
from tenancy.models import ConfigVersion
from tenancy.records import audit, history
from tests.factories import make_agent, make_connection
from tools.mcp_connections import mcp_connection_save
from tools.services import tool_definition_delete, tool_definition_save

SECRET = "sk-very-secret-value-123"


def _versions(obj) -> list[ConfigVersion]:
    return list(history.versions(obj.tenant, obj).order_by("number"))


def _calc(tenant, name="calc", **changes):
    base = {"name": name, "kind": "builtin", "config": {"builtin": "calculator"}}
    return tool_definition_save(tenant=tenant, changes={**base, **changes})


def test_each_save_of_an_agent_is_a_numbered_version_with_a_diff(trio):
    with audit.acting(None):
        agent = agent_save(
            tenant=trio.acme, changes={"slug": "helper", "name": "Helper", "instructions": "A"}
        )
        agent_save(tenant=trio.acme, agent=agent, changes={"instructions": "B"})
    first, second = _versions(agent)
    assert (first.number, second.number) == (1, 2)
    assert first.snapshot["fields"]["instructions"] == "A"
    assert first.changes["name"] == [None, "Helper"]
    assert second.changes == {"instructions": ["A", "B"]}
    assert second.actor_label == "system"
    assert second.snapshot["fields"]["name"] == "Helper"  # the full state, not only the change


def test_a_save_that_changes_nothing_makes_no_version(trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    agent_save(tenant=trio.acme, agent=agent, changes={"name": "Helper"})
    assert len(_versions(agent)) == 1


def test_the_actor_is_recorded(trio, rf):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    request = rf.post("/")
    request.user = trio.alice
    with audit.acting(request):  # as the middleware does for a page or the API
        agent_save(tenant=trio.acme, agent=agent, changes={"name": "H2"})
    assert _versions(agent)[-1].user == trio.alice
    assert _versions(agent)[-1].actor_label == "alice"


def test_provider_secret_is_never_in_a_version_and_restore_keeps_the_current_one(trio):
    conn = connection_save(
        tenant=trio.acme,
        changes={
            "name": "Offline",
            "kind": "offline",
            "api_key": SECRET,
            "extra_headers": {"X-Team": "a"},
        },
    )
    connection_save(
        tenant=trio.acme,
        connection=conn,
        changes={"api_key": "sk-new-" + SECRET, "timeout_s": 10.0},
    )
    versions = _versions(conn)
    dumped = json.dumps([[v.snapshot, v.changes] for v in versions])
    assert SECRET not in dumped
    assert versions[0].snapshot["fields"]["api_key"] == "[set]"
    assert versions[1].changes == {"timeout_s": [60.0, 10.0]}  # a new secret alone: no diff

    restored = history.restore(tenant=trio.acme, instance=conn, number=1, actor=trio.alice)
    conn.refresh_from_db()
    assert conn.timeout_s == 60.0
    assert conn.api_key == "sk-new-" + SECRET  # the current secret stays
    assert restored.number == 3 and restored.restored_from == 1
    assert restored.changes == {"timeout_s": [10.0, 60.0]}
    assert restored.actor_label == "alice"


def test_restoring_the_current_state_is_refused(trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    with pytest.raises(ValidationError, match="Nothing to restore"):
        history.restore(tenant=trio.acme, instance=agent, number=1)
    assert len(_versions(agent)) == 1


def test_a_restore_naming_a_deleted_tool_is_refused_by_the_compiler(trio):
    tool = _calc(trio.acme)
    agent = agent_save(
        tenant=trio.acme, changes={"slug": "helper", "name": "Helper", "tool_names": ["calc"]}
    )
    agent_save(tenant=trio.acme, agent=agent, changes={"tool_names": []})
    tool_definition_delete(tenant=trio.acme, definition=tool)
    with pytest.raises(ValidationError) as refused:
        history.restore(tenant=trio.acme, instance=agent, number=1)
    assert "calc" in str(refused.value)
    agent.refresh_from_db()
    assert agent.tool_names == [] and len(_versions(agent)) == 2


def test_a_restore_naming_a_deleted_connection_is_refused(trio):
    conn = make_connection(trio.acme)
    agent = agent_save(
        tenant=trio.acme,
        changes={"slug": "helper", "name": "Helper", "provider_connection": conn},
    )
    agent_save(tenant=trio.acme, agent=agent, changes={"provider_connection": None})
    conn.delete()
    with pytest.raises(ValidationError) as refused:
        history.restore(tenant=trio.acme, instance=agent, number=1)
    assert "no longer exists" in str(refused.value)


def test_crew_members_and_grants_are_versioned_and_members_restored(trio):
    one, two = make_agent(trio.acme, "one"), make_agent(trio.acme, "two")
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[one, two])
    crew_save(tenant=trio.acme, crew=crew, changes={}, members=[two])
    use_grant(tenant=trio.acme, target=crew, granted=True, user=trio.bob)
    versions = _versions(crew)
    assert [v.snapshot["parts"]["members"] for v in versions] == [
        ["one", "two"],
        ["two"],
        ["two"],
    ]
    assert versions[2].changes == {"grants": [[], ["user bob: use_crew"]]}
    restored = history.restore(tenant=trio.acme, instance=crew, number=1)
    assert list(crew.members.values_list("agent__slug", flat=True)) == ["one", "two"]
    assert restored.number == 4 and restored.snapshot["parts"]["grants"] == []  # one version
    two.delete()
    with pytest.raises(ValidationError, match="two"):
        history.restore(tenant=trio.acme, instance=crew, number=3)


def test_a_grant_by_assign_perm_makes_a_version(trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    assign_perm("agents.use_agent", trio.bob, agent)
    assert _versions(agent)[-1].changes == {"grants": [[], ["user bob: use_agent"]]}


def test_tools_mcp_and_knowledge_bases_are_versioned(trio):
    tool = _calc(trio.acme)
    tool_definition_save(tenant=trio.acme, definition=tool, changes={"description": "Adds."})
    mcp = mcp_connection_save(
        tenant=trio.acme,
        changes={"name": "docs", "url": "https://mcp.example.test/mcp", "auth_header": SECRET},
    )
    agent = make_agent(trio.acme, "reader")
    kb = knowledge_base_save(
        tenant=trio.acme,
        changes={"name": "Docs", "slug": "docs", "embedder": "lexical", "agents": [agent]},
    )
    assert [v.number for v in _versions(tool)] == [1, 2]
    assert _versions(mcp)[0].snapshot["fields"]["auth_header"] == "[set]"
    assert SECRET not in json.dumps(_versions(mcp)[0].snapshot)
    assert _versions(kb)[0].snapshot["fields"]["agents"] == [agent.pk]
    knowledge_base_save(tenant=trio.acme, knowledge_base=kb, changes={"agents": []})
    history.restore(tenant=trio.acme, instance=kb, number=1)
    assert list(kb.agents.all()) == [agent]


def test_another_tenants_object_and_unknown_versions_are_404(trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    with pytest.raises(Http404):
        history.versions(trio.globex, agent)
    with pytest.raises(Http404):
        history.restore(tenant=trio.globex, instance=agent, number=1)
    for number in (0, 2, "x", "1\x00"):
        with pytest.raises(Http404):
            history.version_get(trio.acme, agent, number)


def test_versions_outlive_a_deleted_object(trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    pk = agent.pk
    agent_delete(tenant=trio.acme, agent=agent)
    assert ConfigVersion.objects.filter(object_type="agents.agent", object_id=str(pk)).count() == 1


def test_masked_json_values_are_taken_from_the_current_state():
    stored = {
        "headers": {"Authorization": "[redacted]", "X": "1"},
        "list": [{"token": "[redacted]"}],
    }
    current = {"headers": {"Authorization": "Bearer now"}, "list": []}
    assert history.unredact(stored, current) == {
        "headers": {"Authorization": "Bearer now", "X": "1"},
        "list": [{}],
    }


def test_a_crew_run_records_its_crews_version_and_each_child_its_agents(
    trio, connection, provider_server
):
    from agents.models import Run
    from agents.runs import run_inline

    one = agent_save(tenant=trio.acme, changes={"slug": "one", "name": "One"})
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[one])
    crew_save(tenant=trio.acme, crew=crew, changes={"description": "Both."})
    run = run_inline(tenant=trio.acme, crew=crew, input="hi", initiated_by=trio.alice)
    assert run.status == "succeeded", run.error
    run.refresh_from_db()
    assert run.config_versions == {"agents.crew": [[crew.pk, 2]]}
    child = Run.objects.get(parent=run)
    assert child.config_versions["agents.agent"] == [[one.pk, 1]]


def test_each_run_records_the_versions_current_when_it_started_though_the_process_keeps_them(
    trio, connection, provider_server
):
    """run_config_versions is kept per process (agents/specs.py): a new version, a new
    definition or a deleted one is seen by the next run."""
    from agents.models import Agent
    from agents.runs import run_inline

    adder = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "adder", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    agent = agent_save(  # every tool of the tenant's
        tenant=trio.acme, changes={"slug": "calc", "name": "Calc", "use_all_tools": True}
    )

    def versions() -> dict:
        run = run_inline(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.alice)
        assert run.status == "succeeded", run.error
        return {
            kind: pairs
            for kind, pairs in run.config_versions.items()
            if "agent" in kind or "tool" in kind
        }

    assert versions() == {"agents.agent": [[agent.pk, 1]], "tools.tooldefinition": [[adder.pk, 1]]}
    assert versions() == {"agents.agent": [[agent.pk, 1]], "tools.tooldefinition": [[adder.pk, 1]]}
    agent_save(tenant=trio.acme, agent=agent, changes={"instructions": "Add."})
    assert versions() == {"agents.agent": [[agent.pk, 2]], "tools.tooldefinition": [[adder.pk, 1]]}
    times = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "times", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    assert versions() == {
        "agents.agent": [[agent.pk, 2]],
        "tools.tooldefinition": sorted([[adder.pk, 1], [times.pk, 1]]),
    }
    tool_definition_delete(tenant=trio.acme, definition=adder)
    assert versions() == {"agents.agent": [[agent.pk, 2]], "tools.tooldefinition": [[times.pk, 1]]}
    # A version recorded past the services (no save signal: a baseline, a restore's end).
    Agent.objects.filter(pk=agent.pk).update(instructions="Multiply.")
    history.record(Agent.objects.get(pk=agent.pk))
    assert versions() == {"agents.agent": [[agent.pk, 3]], "tools.tooldefinition": [[times.pk, 1]]}


def test_the_baseline_command_versions_objects_saved_before_history(trio):
    from io import StringIO

    from django.core.management import call_command

    old = make_agent(trio.acme, "old")  # written past the services: no version
    versioned = agent_save(tenant=trio.acme, changes={"slug": "new", "name": "New"})
    out = StringIO()
    call_command("config_history_baseline", stdout=out)
    assert "Recorded 1 first version(s)." in out.getvalue()
    (first,) = _versions(old)
    assert first.number == 1 and first.actor_label == "system (history baseline)"
    assert len(_versions(versioned)) == 1
    call_command("config_history_baseline", stdout=out)
    assert out.getvalue().endswith("Recorded 0 first version(s).\n")


def test_a_restore_sets_the_grants_as_they_were(trio):
    from tenancy.services import group_create, membership_remove

    agent = agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    finance = group_create(tenant=trio.acme, name="Finance")
    use_grant(tenant=trio.acme, target=agent, granted=True, user=trio.bob)
    use_grant(tenant=trio.acme, target=agent, granted=True, group=finance)  # v3
    use_grant(tenant=trio.acme, target=agent, granted=False, user=trio.bob)
    use_grant(tenant=trio.acme, target=agent, granted=False, group=finance)  # v5: open
    restored = history.restore(tenant=trio.acme, instance=agent, number=3)
    assert restored.number == 6 and restored.restored_from == 3
    assert restored.snapshot["parts"]["grants"] == [
        "group Finance: use_agent",
        "user bob: use_agent",
    ]
    membership_remove(membership=trio.acme.memberships.get(user=trio.bob))
    with pytest.raises(ValidationError, match="user bob"):
        history.restore(tenant=trio.acme, instance=agent, number=2)
