"""Publishing only what passes, for crews (agents/publishing.py): a change to a crew with a
required evaluation (its members, mode, limits...) is a draft; the evaluation runs the crew
as drafted, a chat the live crew; it is published when it passes, or by an admin's override.
The service, REST, the page, the configuration document and a restore all go through it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.evaluations import case_save, dataset_save, evaluation_run_to_end
from agents.models import AgentDraft, Crew, Evaluation, Run
from agents.publishing import draft_publish, pending_draft
from agents.runs import run_start
from agents.selectors import crew_member_slugs
from agents.services import agent_save, crew_save
from tenancy.models import AuditEntry, ConfigVersion
from tenancy.policy import Principal
from tests.agents.test_confirmation import settle
from tests.factories import login, make_agent
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(trio, agent, settings) -> Crew:
    """A sequential crew of `agent` alone, gated by a one-case dataset expecting Paris; a
    second agent, `writer`, not in it."""
    settings.EVALUATION_CONCURRENCY = 1
    make_agent(trio.acme, "writer", instructions="Write it up.")
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": "capital of France?", "expect": {"contains": "Paris"}},
    )
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[agent])
    return crew_save(tenant=trio.acme, crew=crew, changes={"required_evaluation": dataset})


def members_of(trio) -> list:
    from agents.models import Agent

    return [Agent.objects.get(tenant=trio.acme, slug=s) for s in ("assistant", "writer")]


def test_a_crews_change_is_evaluated_as_drafted_and_published_when_it_passes(
    trio, team, provider_server
):
    versions = ConfigVersion.objects.filter(object_type="agents.crew", object_id=str(team.pk))
    before = versions.count()
    live = crew_save(
        tenant=trio.acme, crew=team, changes={"max_depth": 2}, members=members_of(trio)
    )
    draft = live.pending_draft
    assert draft.crew_id == team.pk and draft.agent_id is None and draft.status == "evaluating"
    assert draft.fields == {"max_depth": 2} and draft.parts == {"members": ["assistant", "writer"]}
    assert draft.changes == {
        "max_depth": [3, 2],
        "members": [["assistant"], ["assistant", "writer"]],
    }
    assert crew_member_slugs(team) == ["assistant"] and versions.count() == before

    # The evaluation runs the crew as drafted: both members (the second answers Paris).
    provider_server.script("openai", TextReply("Lyon, I think."), TextReply("It is Paris."))
    evaluation = evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    assert evaluation.crew_id == team.pk and evaluation.passed == 1
    assert len(provider_server.received) == 2
    [crew_run] = Run.objects.filter(agent_draft=draft)
    assert crew_run.crew_id == team.pk
    assert crew_run.config_versions["agents.agentdraft"] == [[draft.pk, 0]]
    assert "agents.crew" not in crew_run.config_versions
    draft.refresh_from_db()
    assert draft.status == "published" and draft.score == 1.0
    stored = Crew.objects.get(pk=team.pk)
    assert stored.max_depth == 2 and crew_member_slugs(stored) == ["assistant", "writer"]
    assert versions.count() == before + 1 and draft.published_version == versions.first().number
    assert AuditEntry.objects.filter(details__draft=draft.pk, details__status="published").exists()


def test_a_crews_failing_draft_never_serves_a_chat(trio, team, provider_server):
    draft = crew_save(
        tenant=trio.acme, crew=team, changes={}, members=members_of(trio)
    ).pending_draft
    provider_server.script(
        "openai", TextReply("hi during"), TextReply("Lyon."), TextReply("Rome."), TextReply("ok")
    )
    during = settle(run_start(tenant=trio.acme, crew=team, input="hello", initiated_by=trio.alice))
    assert during.status == "succeeded" and during.agent_draft_id is None
    assert len(provider_server.received) == 1  # the live crew: one member
    evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    draft.refresh_from_db()
    assert draft.status == "failed" and crew_member_slugs(team) == ["assistant"]
    after = settle(run_start(tenant=trio.acme, crew=team, input="hi", initiated_by=trio.alice))
    assert after.status == "succeeded" and len(provider_server.received) == 4
    assert after.config_versions["agents.crew"] == during.config_versions["agents.crew"]


def test_the_gate_and_switching_a_crew_off_apply_at_once(trio, team):
    saved = crew_save(tenant=trio.acme, crew=team, changes={"active": False, "pass_threshold": 0.5})
    assert saved.pending_draft is None
    stored = Crew.objects.get(pk=team.pk)
    assert not stored.active and stored.pass_threshold == 0.5
    assert not AgentDraft.objects.filter(crew=team).exists()


def test_crew_drafts_over_rest(client, trio, team):
    from tests.api.test_resources import as_key, assert_error

    api = as_key(client, trio.acme, "read", "config")
    shown = api.get("/crews/team").json()
    assert shown["required_evaluation"] == team.required_evaluation_id and shown["draft"] is None
    proposed = api.patch("/crews/team", {"members": ["assistant", "writer"], "max_depth": 5})
    assert proposed.status_code == 200, proposed.content
    body = proposed.json()
    assert body["members"] == ["assistant"] and body["max_depth"] == 3
    assert body["draft"]["status"] == "evaluating"
    draft_id = body["draft"]["id"]
    listed = api.get("/crews/team/drafts").json()
    assert [d["id"] for d in listed] == [draft_id]
    assert_error(api.get("/agents/assistant/drafts/" + str(draft_id)), 404)  # not the agent's
    publish = f"/crews/team/drafts/{draft_id}/publish"
    assert_error(api.post(publish, {"override": True, "reason": "x"}), 403)
    other = as_key(client, trio.globex, "read", "config", "admin")
    assert_error(other.get(f"/crews/team/drafts/{draft_id}"), 404)
    admin = as_key(client, trio.acme, "read", "config", "admin")
    assert_error(admin.post(publish, {"override": True, "reason": ""}), 400)
    done = admin.post(publish, {"override": True, "reason": "Reviewed by hand."})
    assert done.status_code == 200, done.content
    stored = api.get("/crews/team").json()
    assert stored["members"] == ["assistant", "writer"] and stored["max_depth"] == 5


def test_the_crew_page_proposes_and_decides_a_draft(client, trio, team, agent):
    def url(view: str, **kwargs) -> str:
        return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})

    second = members_of(trio)[1]
    login(client, trio.alice)
    data = {
        "name": "Team", "slug": "team", "mode": "sequential", "manager": "",
        "max_delegations": "10", "max_depth": "3", "active": "on",
        "required_evaluation": str(team.required_evaluation_id), "pass_threshold": "1",
        f"position_{agent.pk}": "1", f"position_{second.pk}": "2",
    }  # fmt: skip
    page = client.post(url("crew_edit", slug="team"), data, follow=True).content.decode()
    assert "saved as a draft" in page and "A draft awaits: being evaluated" in page
    assert crew_member_slugs(team) == ["assistant"]
    draft = pending_draft(team)
    evaluation = reverse(
        "activity:evaluation", kwargs={"tenant_slug": "acme", "evaluation_id": draft.evaluation_id}
    )
    assert "crew team on capitals" in client.get(evaluation).content.decode()
    publish = url("crew_draft_publish", slug="team", draft_id=draft.pk)
    assert login(Client(), trio.bob).post(publish, {"reason": "x"}).status_code == 403
    assert login(Client(), trio.charlie).post(publish, {"reason": "x"}).status_code == 404
    done = client.post(publish, {"reason": "Checked by hand."}, follow=True).content.decode()
    assert "The draft is published." in done
    assert crew_member_slugs(team) == ["assistant", "writer"]


def test_the_document_gates_a_crew_and_a_restore_proposes_a_draft(trio, team):
    import yaml

    from agents.config_document import DRAFTED, config_export, config_import
    from tenancy.records import history

    document = config_export(tenant=trio.acme)
    [entry] = document["crews"]
    assert entry["publish"] == {"evaluation": "capitals", "threshold": 1.0}
    entry["members"] = ["assistant", "writer"]
    imported = config_import(tenant=trio.acme, text=yaml.safe_dump(document))
    assert imported.applied, imported.problems
    [change] = [c for c in imported.changes if c.section == "crews"]
    assert change.note == DRAFTED and crew_member_slugs(team) == ["assistant"]
    draft = pending_draft(team)
    assert draft.parts == {"members": ["assistant", "writer"]}
    entry["publish"]["evaluation"] = "nope"
    refused = config_import(tenant=trio.acme, text=yaml.safe_dump(document))
    assert [p.path for p in refused.problems] == ["crews[0].publish.evaluation"]

    # Published by override (version 3); restoring version 2 (one member) keeps the gate
    # and proposes its members as a draft.
    alice = Principal.for_initiator(trio.acme, trio.alice)
    draft_publish(tenant=trio.acme, draft=draft, by=alice, reason="Checked.")
    assert crew_member_slugs(team) == ["assistant", "writer"]
    proposed = history.restore(tenant=trio.acme, instance=team, number=2)
    assert isinstance(proposed, history.Proposed) and proposed.restored_from == 2
    assert proposed.draft.parts == {"members": ["assistant"]}
    assert crew_member_slugs(team) == ["assistant", "writer"]


def test_the_admin_shows_a_gated_crew_and_agent_read_only_but_active(client, trio, team, agent):
    """The Django admin saves models directly: there a gated crew or agent keeps its
    behaviour (its page, REST or the document propose changes, as drafts)."""
    agent_save(
        tenant=trio.acme, agent=agent, changes={"required_evaluation": team.required_evaluation}
    )
    login(client, trio.alice)
    data = {
        "slug": "team", "name": "Renamed", "mode": "parallel", "max_depth": "9",
        "members-TOTAL_FORMS": "0", "members-INITIAL_FORMS": "0",
        "members-MIN_NUM_FORMS": "0", "members-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    response = client.post(f"/admin/agents/crew/{team.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = Crew.objects.get(pk=team.pk)
    assert (stored.name, stored.mode, stored.max_depth) == ("Team", "sequential", 3)
    assert not stored.active and crew_member_slugs(stored) == ["assistant"]  # `active` applies
    page = client.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    assert 'name="instructions"' not in page and 'name="active"' in page
