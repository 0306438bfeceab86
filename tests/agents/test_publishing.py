"""Publishing only what passes (agents/publishing.py): a change to an agent with a required
evaluation is a draft whose evaluation runs the draft; it goes live when the score reaches
the threshold, stays a failed draft below, never serves a chat; an admin overrides with a
reason (audited), anyone who may change the agent discards; one pending draft per agent."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.test import Client

from agents.evaluations import case_save, dataset_save, evaluation_run_to_end
from agents.models import Agent, AgentDraft, Evaluation, Run
from agents.publishing import draft_discard, draft_publish, live_score, pending_draft
from agents.runs import run_start
from agents.services import agent_save
from agents.skills import Pin, agent_pin_labels
from tenancy.models import ApiKey, AuditEntry, ConfigVersion
from tenancy.policy import Principal
from tenancy.services import api_key_create
from tests.agents.test_confirmation import settle
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

LIVE = "Be brief."
DRAFTED = "Answer like a pirate."


@pytest.fixture
def gated(trio, agent, settings) -> Agent:
    """`agent` (instructions "Be brief.") gated by a one-case dataset that expects Paris."""
    settings.EVALUATION_CONCURRENCY = 1
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": "capital of France?", "expect": {"contains": "Paris"}},
    )
    return agent_save(
        tenant=trio.acme,
        agent=agent,
        changes={"required_evaluation": dataset, "pass_threshold": 1.0},
    )


def instructions_sent(request) -> str:
    return json.dumps(request.body)


def chat(trio, agent: Agent) -> Run:
    return settle(run_start(tenant=trio.acme, agent=agent, input="hello", initiated_by=trio.alice))


def test_a_change_is_a_draft_until_its_evaluation_passes_then_published(
    trio, gated, provider_server
):
    versions = ConfigVersion.objects.filter(object_type="agents.agent", object_id=str(gated.pk))
    before = versions.count()
    live = agent_save(tenant=trio.acme, agent=gated, changes={"instructions": DRAFTED})
    draft = live.pending_draft
    assert live.instructions == LIVE and Agent.objects.get(pk=gated.pk).instructions == LIVE
    assert draft.status == "evaluating" and draft.changes == {"instructions": [LIVE, DRAFTED]}
    assert versions.count() == before  # nothing saved on the live agent
    evaluation = Evaluation.objects.get(pk=draft.evaluation_id)
    assert evaluation.draft_id == draft.pk and evaluation.agent_id == gated.pk

    provider_server.script("openai", TextReply("It is Paris."))
    evaluation = evaluation_run_to_end(evaluation)

    # The evaluation ran the draft (its run pinned to it), and it passed: published.
    [request] = provider_server.received
    assert DRAFTED in instructions_sent(request) and LIVE not in instructions_sent(request)
    [case_run] = Run.objects.filter(agent_draft=draft)
    assert case_run.config_versions["agents.agentdraft"] == [[draft.pk, 0]]
    assert "agents.agent" not in case_run.config_versions
    draft.refresh_from_db()
    assert draft.status == "published" and draft.score == 1.0
    assert Agent.objects.get(pk=gated.pk).instructions == DRAFTED
    assert versions.count() == before + 1 and draft.published_version == versions.first().number
    decision = AuditEntry.objects.filter(details__draft=draft.pk, details__status="published")
    assert decision.get().details["decision"] == (
        f"published after evaluation {evaluation.pk} scored 1.00"
    )
    assert pending_draft(gated) is None and live_score(Agent.objects.get(pk=gated.pk)) == 1.0


def test_a_draft_that_fails_its_evaluation_never_serves_a_chat(trio, gated, provider_server):
    draft = agent_save(
        tenant=trio.acme, agent=gated, changes={"instructions": DRAFTED}
    ).pending_draft
    provider_server.script(
        "openai", TextReply("hi during"), TextReply("It is Lyon."), TextReply("hi after")
    )
    during = chat(trio, gated)  # while the draft is evaluated: the live version answers
    assert during.status == "succeeded" and during.agent_draft_id is None
    assert DRAFTED not in instructions_sent(provider_server.received[0])
    assert LIVE in instructions_sent(provider_server.received[0])
    live_number = during.config_versions["agents.agent"][0][1]

    evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    draft.refresh_from_db()
    assert draft.status == "failed" and draft.score == 0.0
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE
    assert DRAFTED in instructions_sent(provider_server.received[1])  # the evaluation's run

    after = chat(trio, Agent.objects.get(pk=gated.pk))
    assert after.status == "succeeded" and LIVE in instructions_sent(provider_server.received[2])
    assert DRAFTED not in instructions_sent(provider_server.received[2])
    assert after.config_versions["agents.agent"][0][1] == live_number  # the same version
    assert not Run.objects.filter(agent_draft__isnull=False, conversation__isnull=False).exists()
    assert AuditEntry.objects.filter(details__draft=draft.pk, details__status="failed").exists()


def test_one_pending_draft_a_newer_change_replaces_it_the_same_change_keeps_it(trio, gated):
    first = agent_save(tenant=trio.acme, agent=gated, changes={"instructions": "A"}).pending_draft
    again = agent_save(tenant=trio.acme, agent=gated, changes={"instructions": "A"}).pending_draft
    assert again.pk == first.pk  # a re-import of the same document: its evaluation goes on
    newer = agent_save(tenant=trio.acme, agent=gated, changes={"instructions": "B"}).pending_draft
    first.refresh_from_db()
    assert first.status == "replaced" and newer.status == "evaluating"
    assert Evaluation.objects.get(pk=first.evaluation_id).status == "cancelled"
    assert AgentDraft.objects.filter(agent=gated, status="evaluating").count() == 1


def test_the_gate_itself_and_switching_off_apply_at_once(trio, gated):
    saved = agent_save(
        tenant=trio.acme, agent=gated, changes={"pass_threshold": 0.5, "active": False}
    )
    assert saved.pending_draft is None
    stored = Agent.objects.get(pk=gated.pk)
    assert stored.pass_threshold == 0.5 and not stored.active
    mixed = agent_save(
        tenant=trio.acme, agent=stored, changes={"active": True, "model": "gpt-other"}
    )
    stored.refresh_from_db()
    assert (
        stored.active
        and stored.model == ""
        and mixed.pending_draft.fields == {"model": "gpt-other"}
    )
    with pytest.raises(ValidationError):  # validated as any save: nothing drafted
        agent_save(tenant=trio.acme, agent=stored, changes={"max_rounds": 0})
    assert AgentDraft.objects.filter(agent=gated).count() == 1
    with pytest.raises(ValidationError, match="Between 0 and 1"):
        agent_save(tenant=trio.acme, agent=stored, changes={"pass_threshold": 1.5})


def test_a_dataset_without_cases_leaves_the_draft_unevaluated(trio, agent):
    empty = dataset_save(tenant=trio.acme, changes={"name": "empty"})
    agent = agent_save(tenant=trio.acme, agent=agent, changes={"required_evaluation": empty})
    draft = agent_save(tenant=trio.acme, agent=agent, changes={"instructions": "X"}).pending_draft
    assert draft.status == "unevaluated" and "no cases" in draft.note
    assert Agent.objects.get(pk=agent.pk).instructions == LIVE


def test_an_override_needs_an_admin_with_the_admin_scope_and_a_reason(trio, gated):
    draft = agent_save(
        tenant=trio.acme, agent=gated, changes={"instructions": DRAFTED}
    ).pending_draft
    alice = Principal.for_initiator(trio.acme, trio.alice)
    bob = Principal.for_initiator(trio.acme, trio.bob)  # a member
    config_key, _ = api_key_create(
        tenant=trio.acme, name="cfg", scopes=["config"], created_by=trio.alice
    )
    for who in (bob, Principal.of_key(ApiKey.objects.get(pk=config_key.pk))):
        with pytest.raises(PermissionDenied):
            draft_publish(tenant=trio.acme, draft=draft, by=who, reason="ship it")
    with pytest.raises(ValidationError, match="Say why"):
        draft_publish(tenant=trio.acme, draft=draft, by=alice, reason="  ")
    with pytest.raises(Http404):
        draft_publish(
            tenant=trio.globex,
            draft=draft,
            by=Principal.for_initiator(trio.globex, trio.charlie),
            reason="x",
        )
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE

    published = draft_publish(tenant=trio.acme, draft=draft, by=alice, reason="Case outdated.")
    assert published.status == "published" and published.decided_by_label == "alice"
    assert Agent.objects.get(pk=gated.pk).instructions == DRAFTED
    assert Evaluation.objects.get(pk=draft.evaluation_id).status == "cancelled"
    entry = AuditEntry.objects.get(details__draft=draft.pk, details__status="published")
    assert entry.actor_label == "alice"
    assert entry.details["decision"] == (
        "published by alice, overriding its evaluation: Case outdated."
    )
    with pytest.raises(ValidationError, match="published already"):
        draft_publish(tenant=trio.acme, draft=draft, by=alice, reason="again")


def test_a_discarded_draft_leaves_the_live_agent(trio, gated):
    draft = agent_save(
        tenant=trio.acme, agent=gated, changes={"instructions": DRAFTED}
    ).pending_draft
    bob = Principal.for_initiator(trio.acme, trio.bob)
    with pytest.raises(PermissionDenied):
        draft_discard(tenant=trio.acme, draft=draft, by=bob)
    alice = Principal.for_initiator(trio.acme, trio.alice)
    discarded = draft_discard(tenant=trio.acme, draft=draft, by=alice, reason="Not now.")
    assert discarded.status == "discarded" and pending_draft(gated) is None
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE
    assert Evaluation.objects.get(pk=draft.evaluation_id).status == "cancelled"


def test_drafts_over_rest(client, trio, gated, provider_server):
    from tests.api.test_resources import as_key, assert_error

    api = as_key(client, trio.acme, "read", "config")
    shown = api.get("/agents/assistant").json()
    assert shown["required_evaluation"] == gated.required_evaluation_id and shown["draft"] is None
    proposed = api.patch("/agents/assistant", {"instructions": DRAFTED})
    assert proposed.status_code == 200, proposed.content
    body = proposed.json()
    assert body["instructions"] == LIVE and body["draft"]["status"] == "evaluating"
    assert body["draft"]["changes"] == {"instructions": [LIVE, DRAFTED]}
    assert body["draft"]["proposed_by"].startswith("API key test")
    draft_id = body["draft"]["id"]

    provider_server.script("openai", TextReply("Lyon."))
    evaluation_run_to_end(Evaluation.objects.get(pk=body["draft"]["evaluation"]))
    listed = api.get("/agents/assistant/drafts").json()
    assert [(d["id"], d["status"], d["score"]) for d in listed] == [(draft_id, "failed", 0.0)]
    assert api.get(f"/agents/assistant/drafts/{draft_id}").json()["threshold"] == 1.0

    # An override needs the admin scope, `override` and a reason; bad ids answer 404.
    publish = f"/agents/assistant/drafts/{draft_id}/publish"
    assert_error(api.post(publish, {"override": True, "reason": "x"}), 403)
    admin = as_key(client, trio.acme, "read", "config", "admin")
    assert_error(admin.post(publish, {"override": False, "reason": "x"}), 400)
    assert_error(admin.post(publish, {"override": True, "reason": ""}), 400)
    assert_error(admin.post(publish, {"override": True}), 400)
    assert_error(admin.post(publish, {"override": True, "reason": "x", "extra": 1}), 400)
    assert_error(admin.post(publish, raw="[1]"), 400)
    for bad in ("0", "abc", "99999999999999999999999", str(draft_id + 1000)):
        assert_error(admin.get(f"/agents/assistant/drafts/{bad}"), 404)
    other = as_key(client, trio.globex, "read", "config", "admin")
    assert_error(other.get(f"/agents/assistant/drafts/{draft_id}"), 404)
    assert_error(other.post(publish, {"override": True, "reason": "x"}), 404)
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE

    done = admin.post(publish, {"override": True, "reason": "The case is outdated."})
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "published" and done.json()["reason"] == "The case is outdated."
    assert api.get("/agents/assistant").json()["instructions"] == DRAFTED
    assert_error(admin.post(publish, {"override": True, "reason": "again"}), 400)

    second = api.patch("/agents/assistant", {"instructions": "Again."}).json()["draft"]["id"]
    discard = api.post(f"/agents/assistant/drafts/{second}/discard", {"reason": "No."})
    assert discard.status_code == 200 and discard.json()["status"] == "discarded"
    assert_error(as_key(client, trio.acme, "read").post(
        f"/agents/assistant/drafts/{second}/discard", {}), 403)  # fmt: skip


def test_the_agent_page_proposes_shows_and_decides_a_draft(client, trio, gated, provider_server):
    from django.urls import reverse

    from tests.factories import login
    from tests.web.test_config import agent_data

    def url(view: str, **kwargs) -> str:
        return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})

    edit = url("agent_edit", slug="assistant")
    form = agent_data(
        name="Assistant", slug="assistant", instructions=DRAFTED, tool_names=[],
        use_all_tools="on", required_evaluation=str(gated.required_evaluation_id),
        pass_threshold="1",
    )  # fmt: skip
    login(client, trio.alice)
    saved = client.post(edit, form, follow=True)
    assert saved.status_code == 200
    page = saved.content.decode()
    assert "saved as a draft" in page and "A draft awaits: being evaluated" in page
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE
    draft = pending_draft(gated)
    provider_server.script("openai", TextReply("Lyon."))
    evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    page = client.get(edit).content.decode()
    assert "failed its evaluation" in page and "Override and publish" in page
    assert "<del>Be brief.</del>" in page and f"<ins>{DRAFTED}</ins>" in page

    publish = url("agent_draft_publish", slug="assistant", draft_id=draft.pk)
    discard = url("agent_draft_discard", slug="assistant", draft_id=draft.pk)
    assert client.get(publish).status_code == 405
    refused = client.post(publish, {"reason": ""}, follow=True).content.decode()
    assert "Say why" in refused and Agent.objects.get(pk=gated.pk).instructions == LIVE
    assert (
        client.post(url("agent_draft_publish", slug="assistant", draft_id="x")).status_code == 404
    )

    bob = login(Client(), trio.bob)  # a member
    assert bob.post(publish, {"reason": "mine"}).status_code == 403
    outsider = login(Client(), trio.charlie)
    assert outsider.post(discard).status_code == 404

    done = client.post(publish, {"reason": "The case is outdated."}, follow=True)
    assert "The draft is published." in done.content.decode()
    assert Agent.objects.get(pk=gated.pk).instructions == DRAFTED
    assert "A draft awaits" not in client.get(edit).content.decode()


def test_the_configuration_document_sets_the_gate_and_an_import_makes_a_draft(trio, agent):
    import yaml

    from agents.config_document import DRAFTED as SAYS_DRAFTED
    from agents.config_document import config_export, config_import

    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme, dataset=dataset, changes={"input": "q", "expect": {"contains": "x"}}
    )
    document = config_export(tenant=trio.acme)
    [entry] = document["agents"]
    assert entry["publish"] == {"evaluation": None, "threshold": 1.0}
    entry["publish"] = {"evaluation": "nope", "threshold": 0.8}
    refused = config_import(tenant=trio.acme, text=yaml.safe_dump(document))
    assert [p.path for p in refused.problems] == ["agents[0].publish.evaluation"]

    entry["publish"]["evaluation"] = "capitals"
    gated_now = config_import(tenant=trio.acme, text=yaml.safe_dump(document))
    assert gated_now.applied and not gated_now.changes[0].note  # the gate applies at once
    stored = Agent.objects.get(pk=agent.pk)
    assert stored.required_evaluation_id == dataset.pk and stored.pass_threshold == 0.8

    entry["instructions"] = DRAFTED
    dry = config_import(tenant=trio.acme, text=yaml.safe_dump(document), dry_run=True)
    assert dry.changes[0].note == SAYS_DRAFTED and not AgentDraft.objects.exists()
    imported = config_import(tenant=trio.acme, text=yaml.safe_dump(document))
    assert imported.applied and imported.as_dict()["changes"][0]["note"] == SAYS_DRAFTED
    assert Agent.objects.get(pk=agent.pk).instructions == LIVE
    draft = pending_draft(agent)
    assert draft.fields == {"instructions": DRAFTED} and draft.status == "evaluating"
    again = config_import(tenant=trio.acme, text=yaml.safe_dump(document))  # the same: kept
    assert again.applied and pending_draft(agent).pk == draft.pk


def verbose(trio, gated: Agent) -> None:
    """Version 2 of the gated agent: "Be verbose." (published by override), threshold 1."""
    agent_save(tenant=trio.acme, agent=gated, changes={"pass_threshold": 0.5})
    draft = agent_save(
        tenant=trio.acme, agent=gated, changes={"instructions": "Be verbose."}
    ).pending_draft
    alice = Principal.for_initiator(trio.acme, trio.alice)
    draft_publish(tenant=trio.acme, draft=draft, by=alice, reason="setting up")
    agent_save(tenant=trio.acme, agent=gated, changes={"pass_threshold": 1.0})


def test_a_restore_of_a_gated_agent_is_a_draft_evaluated_like_any_change(
    trio, gated, provider_server
):
    """Version 1 had other instructions (and the gate at 0.5): restoring it keeps today's
    gate and proposes its instructions as a draft; its evaluation decides, as for an edit."""
    from tenancy.records import history

    verbose(trio, gated)
    versions = ConfigVersion.objects.filter(object_type="agents.agent", object_id=str(gated.pk))
    before = versions.count()
    proposed = history.restore(tenant=trio.acme, instance=gated, number=1, actor=trio.alice)
    assert isinstance(proposed, history.Proposed) and proposed.restored_from == 1
    draft = proposed.draft
    assert draft.fields == {"instructions": LIVE} and draft.status == "evaluating"
    stored = Agent.objects.get(pk=gated.pk)
    assert stored.instructions == "Be verbose." and stored.pass_threshold == 1.0  # its gate
    assert versions.count() == before  # nothing live changed yet

    provider_server.script("openai", TextReply("Lyon."))
    evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    draft.refresh_from_db()
    assert draft.status == "failed" and Agent.objects.get(pk=gated.pk).instructions == "Be verbose."


def test_restore_over_rest_and_the_page_answers_the_draft(client, trio, gated):
    from django.urls import reverse

    from tests.api.test_resources import as_key
    from tests.factories import login

    verbose(trio, gated)
    api = as_key(client, trio.acme, "read", "config")
    restored = api.post("/agents/assistant/versions/1/restore")
    assert restored.status_code == 202, restored.content
    body = restored.json()
    assert body["restored_from"] == 1 and body["draft"]["status"] == "evaluating"
    assert body["draft"]["changes"] == {"instructions": ["Be verbose.", LIVE]}
    assert Agent.objects.get(pk=gated.pk).instructions == "Be verbose."

    login(client, trio.alice)
    url = reverse(
        "config:history_restore",
        kwargs={"tenant_slug": "acme", "kind": "agents", "pk": gated.pk, "number": 1},
    )
    page = client.post(url, follow=True).content.decode()  # the same change: the same draft
    assert f"is proposed as draft {body['draft']['id']}" in page
    assert AgentDraft.objects.filter(agent=gated, status="evaluating").count() == 1


def test_a_gated_agents_skill_pins_are_drafted_and_fixed_to_numbers(trio, gated, provider_server):
    """A pin change is a change of the agent: drafted, and the evaluation's run is given the
    draft's skills (the live agent none). `@latest` is stored as its number, so a version
    approved later reaches the agent only through a draft of its own."""
    from tests.agents.test_skills import install, skill_zip

    first = install(trio)
    draft = agent_save(
        tenant=trio.acme, agent=gated, changes={}, pins=[Pin("pdf-forms")]
    ).pending_draft
    assert draft.parts == {"skills": ["pdf-forms@1"]} and draft.fields == {}
    assert draft.changes == {"skills": [[], ["pdf-forms@1"]]}
    assert agent_pin_labels(gated) == []  # not live yet
    with pytest.raises(ValidationError, match="No skill named"):
        agent_save(tenant=trio.acme, agent=gated, changes={}, pins=[Pin("nope")])

    provider_server.script("openai", TextReply("Paris."))
    evaluation_run_to_end(Evaluation.objects.get(pk=draft.evaluation_id))
    [request] = provider_server.received
    assert "pdf-forms: Fill in PDF forms." in json.dumps(request.body)  # the draft's skill
    offered = {t["function"]["name"] for t in request.body["tools"]}
    assert {"load_skill", "read_skill_file"} <= offered
    draft.refresh_from_db()
    assert draft.status == "published" and agent_pin_labels(gated) == ["pdf-forms@1"]

    second = install(trio, skill_zip(body="Changed."))  # approved: not this agent's yet
    assert second.number == 2 and first.number == 1
    assert agent_pin_labels(gated) == ["pdf-forms@1"]
    again = agent_save(tenant=trio.acme, agent=gated, changes={}, pins=[Pin("pdf-forms")])
    assert again.pending_draft.parts == {"skills": ["pdf-forms@2"]}  # proposed, evaluated


def test_gating_an_agent_fixes_its_latest_pins_to_their_numbers(trio, agent):
    from tests.agents.test_skills import install

    install(trio)
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    agent_save(tenant=trio.acme, agent=agent, changes={}, pins=[Pin("pdf-forms")])
    assert agent_pin_labels(agent) == ["pdf-forms@latest"]  # ungated: follows approvals
    agent_save(tenant=trio.acme, agent=agent, changes={"required_evaluation": dataset})
    assert agent_pin_labels(agent) == ["pdf-forms@1"]
