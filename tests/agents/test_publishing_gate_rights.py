"""Who may weaken a publish gate (agents/publishing.py `gate_check`): on a gated agent or
crew, removing its required evaluation, naming another dataset or lowering its threshold
needs the right to override evaluations (an admin-scope key, an owner's or admin's
session), is audited as an override, and is refused at every face otherwise — REST 403,
a form error on the page, a problem at the entry's path in a configuration document —
leaving the gate as it was. Raising the threshold needs only `change_config`."""

from __future__ import annotations

from copy import deepcopy

import pytest
import yaml
from django.urls import reverse

from agents.config_document import config_export, config_import
from agents.evaluations import case_save, dataset_save
from agents.models import Agent, AgentDraft, Crew
from agents.publishing import WEAKEN_REFUSED
from agents.services import agent_save, crew_save
from tenancy.models import AuditEntry, Role, Scope
from tenancy.policy import POLICY, Action, Principal, Rule
from tenancy.services import api_key_create
from tests.api.test_resources import as_key, assert_error
from tests.factories import add_member, login, make_user
from tests.web.test_config import agent_data

pytestmark = pytest.mark.django_db(transaction=True)


def capitals(trio):
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": "capital of France?", "expect": {"contains": "Paris"}},
    )
    return dataset


@pytest.fixture
def gated(trio, agent) -> Agent:
    """`agent` gated by "capitals" at 0.8."""
    changes = {"required_evaluation": capitals(trio), "pass_threshold": 0.8}
    return agent_save(tenant=trio.acme, agent=agent, changes=changes)


def gate_of(target: Agent | Crew) -> tuple[int | None, float]:
    target.refresh_from_db()
    return target.required_evaluation_id, target.pass_threshold


def overrides_by_owners_only(monkeypatch) -> None:
    """A policy distinguishing the two rights for sessions too: owners override, admins
    change the configuration (the shipped policy gives both to admins)."""
    monkeypatch.setitem(
        POLICY, Action.OVERRIDE_EVALUATION, Rule(Role.OWNER, Scope.ADMIN, "owners only")
    )


def test_over_rest_a_config_key_may_raise_the_gate_not_weaken_it(client, trio, gated):
    dataset = gated.required_evaluation_id
    other = dataset_save(tenant=trio.acme, changes={"name": "easier"})
    config = as_key(client, trio.acme, "read", "config")
    for weakening in (
        {"required_evaluation": None},
        {"pass_threshold": 0.5},
        {"required_evaluation": other.pk},
        {"required_evaluation": None, "instructions": "Anything now."},
    ):
        refused = assert_error(config.patch("/agents/assistant", weakening), 403)
        assert refused["message"] == WEAKEN_REFUSED
        assert gate_of(gated) == (dataset, 0.8)
    assert Agent.objects.get(pk=gated.pk).instructions == "Be brief."
    assert not AgentDraft.objects.exists()

    raised = config.patch("/agents/assistant", {"pass_threshold": 0.9})
    assert raised.status_code == 200, raised.content
    assert raised.json()["draft"] is None and gate_of(gated) == (dataset, 0.9)
    same = config.patch("/agents/assistant", {"required_evaluation": dataset})
    assert same.status_code == 200 and gate_of(gated) == (dataset, 0.9)

    admin = as_key(client, trio.acme, "read", "config", "admin")
    removed = admin.patch("/agents/assistant", {"required_evaluation": None})
    assert removed.status_code == 200, removed.content
    assert gate_of(gated) == (None, 0.9)
    entry = AuditEntry.objects.get(details__decision__icontains="overriding the publish gate")
    assert entry.details["decision"] == (
        "API key test removed its required evaluation, overriding the publish gate"
    )
    assert entry.api_key_id is not None and entry.object_id == str(gated.pk)
    # Ungated now: gating it again needs only `change_config`.
    again = config.patch("/agents/assistant", {"required_evaluation": dataset})
    assert again.status_code == 200 and gate_of(gated) == (dataset, 0.9)


def test_the_service_lets_the_platform_and_overriders_weaken_a_gate(trio, gated):
    alice = Principal.for_initiator(trio.acme, trio.alice)  # the owner
    lowered = agent_save(tenant=trio.acme, agent=gated, changes={"pass_threshold": 0.5}, by=alice)
    assert lowered.pass_threshold == 0.5 and lowered.pending_draft is None
    entry = AuditEntry.objects.get(details__decision__icontains="overriding")
    assert entry.details["decision"] == (
        "alice lowered its pass threshold from 0.8 to 0.5, overriding the publish gate"
    )
    assert entry.user_id == trio.alice.pk
    agent_save(tenant=trio.acme, agent=gated, changes={"required_evaluation": None})  # platform
    assert gate_of(gated) == (None, 0.5)


def test_the_agent_page_refuses_a_member_who_may_not_override(client, trio, gated, monkeypatch):
    overrides_by_owners_only(monkeypatch)
    dave = make_user("dave")
    add_member(trio.acme, dave, Role.ADMIN)
    edit = reverse("config:agent_edit", kwargs={"tenant_slug": "acme", "slug": "assistant"})
    form = agent_data(
        name="Assistant", slug="assistant", instructions="Be brief.", tool_names=[],
        use_all_tools="on", required_evaluation="", pass_threshold="0.8",
    )  # fmt: skip
    login(client, dave)
    refused = client.post(edit, form)
    assert refused.status_code == 400 and WEAKEN_REFUSED in refused.content.decode()
    assert gate_of(gated) == (gated.required_evaluation_id, 0.8)
    raised = {**form, "required_evaluation": str(gated.required_evaluation_id)}
    assert client.post(edit, {**raised, "pass_threshold": "0.9"}).status_code == 302
    assert gate_of(gated)[1] == 0.9

    login(client, trio.alice)  # the owner may
    assert client.post(edit, form).status_code == 302
    assert gate_of(gated) == (None, 0.8)
    assert AuditEntry.objects.filter(
        user=trio.alice, details__decision__icontains="overriding the publish gate"
    ).exists()


def test_a_document_import_refuses_at_the_entrys_path_and_applies_nothing(trio, gated):
    document = config_export(tenant=trio.acme)
    [entry] = document["agents"]
    helper = {**deepcopy(entry), "slug": "helper", "name": "Helper"}
    entry["publish"] = {"evaluation": None, "threshold": 0.8}
    entry["instructions"] = "Anything now."
    document["agents"] = [helper, entry]  # a new agent saved first: rolled back too
    key, _ = api_key_create(tenant=trio.acme, name="cfg", scopes=["config"], created_by=trio.alice)
    text = yaml.safe_dump(document)
    plan = config_import(tenant=trio.acme, text=text, by=Principal.of_key(key))
    assert not plan.applied
    assert [(p.path, p.reason) for p in plan.problems] == [("agents[1]", WEAKEN_REFUSED)]
    gated.refresh_from_db()
    assert gate_of(gated)[0] is not None and gated.instructions == "Be brief."
    assert not Agent.objects.filter(slug="helper").exists() and not AgentDraft.objects.exists()

    owner = Principal.for_initiator(trio.acme, trio.alice)
    done = config_import(tenant=trio.acme, text=text, by=owner)
    assert done.applied and gate_of(gated)[0] is None


def test_a_crews_gate_is_kept_the_same_way(client, trio, agent):
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[agent])
    dataset = capitals(trio)
    crew_save(tenant=trio.acme, crew=crew, changes={"required_evaluation": dataset})
    config = as_key(client, trio.acme, "read", "config")
    refused = assert_error(config.patch("/crews/team", {"pass_threshold": 0.5}), 403)
    assert refused["message"] == WEAKEN_REFUSED and gate_of(crew) == (dataset.pk, 1.0)
    admin = as_key(client, trio.acme, "read", "config", "admin")
    removed = admin.patch("/crews/team", {"required_evaluation": None})
    assert removed.status_code == 200, removed.content
    assert gate_of(crew) == (None, 1.0)
    assert AuditEntry.objects.filter(
        object_type="agents.crew", details__decision__icontains="overriding the publish gate"
    ).exists()


def test_the_django_admin_never_edits_a_gated_agents_gate(client, trio, gated):
    """The admin saves models directly, past the rule: it never shows the gate, and a
    gated agent's fields but `active` are read-only there (publishing_admin.EDITABLE)."""
    login(client, trio.alice)
    form = client.get(f"/admin/agents/agent/{gated.pk}/change/").context["adminform"].form
    assert "active" in form.fields  # switching it off must not wait
    assert not {"required_evaluation", "pass_threshold", "instructions"} & set(form.fields)
