"""Agent, crew, conversation and fact services: validated saves, conflicts, tenant checks."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from agents import services
from agents.models import Agent, Conversation, Crew, CrewMember
from tenancy.records.saving import SaveConflict, save_validated

pytestmark = pytest.mark.django_db


@pytest.fixture
def skip_constraint_checks(monkeypatch):
    """A duplicate that arrives after validation: full_clean sees no other row."""

    def apply(model) -> None:
        monkeypatch.setattr(model, "validate_constraints", lambda self, exclude=None: None)

    return apply


def member_slugs(crew: Crew) -> list[str]:
    return [m.agent.slug for m in CrewMember.objects.filter(crew=crew).select_related("agent")]


# -- agents -------------------------------------------------------------------------------
def test_agent_save_creates_for_the_tenant_and_updates(trio):
    agent = services.agent_save(tenant=trio.acme, changes={"slug": "helper", "name": "Helper"})
    assert agent.pk and agent.tenant_id == trio.acme.pk and agent.version == 1
    services.agent_save(tenant=trio.acme, agent=agent, changes={"name": "Helper 2"})
    agent.refresh_from_db()
    assert agent.name == "Helper 2" and agent.version == 2


def test_agent_save_refuses_invalid_data_and_writes_nothing(trio):
    with pytest.raises(ValidationError) as caught:
        services.agent_save(
            tenant=trio.acme, changes={"slug": "bad", "name": "Bad", "max_rounds": 0}
        )
    assert "max_rounds" in caught.value.message_dict
    assert not Agent.objects.exists()


def test_agent_duplicate_slug_is_a_validation_error_and_a_race_a_conflict(
    trio, skip_constraint_checks
):
    services.agent_save(tenant=trio.acme, changes={"slug": "dup", "name": "One"})
    with pytest.raises(ValidationError):  # seen by full_clean: the API's 400, as before
        services.agent_save(tenant=trio.acme, changes={"slug": "dup", "name": "Two"})
    skip_constraint_checks(Agent)
    with pytest.raises(SaveConflict, match="duplicate name or slug"):
        services.agent_save(tenant=trio.acme, changes={"slug": "dup", "name": "Two"})
    assert list(Agent.objects.values_list("name", flat=True)) == ["One"]
    # another tenant may use the same slug
    services.agent_save(tenant=trio.globex, changes={"slug": "dup", "name": "Globex's"})


def test_agent_of_another_tenant_is_not_found_and_unchanged(trio):
    agent = services.agent_save(tenant=trio.globex, changes={"slug": "theirs", "name": "X"})
    with pytest.raises(Http404):
        services.agent_save(tenant=trio.acme, agent=agent, changes={"name": "Taken"})
    with pytest.raises(Http404):
        services.agent_delete(tenant=trio.acme, agent=agent)
    agent.refresh_from_db()
    assert agent.name == "X" and agent.version == 1


def test_agent_delete(trio):
    agent = services.agent_save(tenant=trio.acme, changes={"slug": "gone", "name": "Gone"})
    services.agent_delete(tenant=trio.acme, agent=agent)
    assert not Agent.objects.exists()


def test_changes_may_not_move_a_row_to_another_tenant(trio):
    with pytest.raises(ValueError):
        services.agent_save(
            tenant=trio.acme, changes={"slug": "x", "name": "X", "tenant": trio.globex}
        )
    assert not Agent.objects.exists()


# -- crews --------------------------------------------------------------------------------
@pytest.fixture
def agents3(trio) -> list[Agent]:
    return [
        services.agent_save(tenant=trio.acme, changes={"slug": slug, "name": slug.title()})
        for slug in ("ann", "ben", "cid")
    ]


def test_crew_members_are_replaced_in_order_and_kept_when_not_given(trio, agents3):
    ann, ben, cid = agents3
    crew = services.crew_save(
        tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[cid, ann]
    )
    assert crew.tenant_id == trio.acme.pk
    assert member_slugs(crew) == ["cid", "ann"]
    services.crew_save(tenant=trio.acme, crew=crew, changes={"name": "Team 2"})
    assert member_slugs(crew) == ["cid", "ann"]  # members=None: left alone
    services.crew_save(tenant=trio.acme, crew=crew, changes={}, members=[ben, cid, ann])
    assert member_slugs(crew) == ["ben", "cid", "ann"]
    assert list(CrewMember.objects.filter(crew=crew).values_list("position", flat=True)) == [
        0,
        1,
        2,
    ]
    services.crew_save(tenant=trio.acme, crew=crew, changes={}, members=[])
    assert member_slugs(crew) == []
    crew.refresh_from_db()
    assert crew.name == "Team 2"


def test_crew_invalid_data_writes_neither_crew_nor_members(trio, agents3):
    crew = services.crew_save(
        tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[agents3[0]]
    )
    with pytest.raises(ValidationError) as caught:  # hierarchical needs a manager
        services.crew_save(
            tenant=trio.acme,
            crew=crew,
            changes={"mode": "hierarchical"},
            members=[agents3[1], agents3[2]],
        )
    assert "manager" in caught.value.message_dict
    crew.refresh_from_db()
    assert crew.mode == "sequential" and member_slugs(crew) == ["ann"]
    with pytest.raises(ValidationError):
        services.crew_save(tenant=trio.acme, changes={"slug": "bad slug!", "name": "Bad"})
    assert Crew.objects.count() == 1


def test_crew_members_of_another_tenant_are_refused(trio, agents3):
    outsider = services.agent_save(tenant=trio.globex, changes={"slug": "out", "name": "Out"})
    with pytest.raises(ValidationError):
        services.crew_save(
            tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[outsider]
        )
    assert not Crew.objects.exists()


def test_crew_duplicate_slug_race_is_a_conflict(trio, skip_constraint_checks):
    services.crew_save(tenant=trio.acme, changes={"slug": "team", "name": "One"})
    skip_constraint_checks(Crew)
    with pytest.raises(SaveConflict):
        services.crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Two"})
    assert list(Crew.objects.values_list("name", flat=True)) == ["One"]


def test_crew_of_another_tenant_is_not_found_and_unchanged(trio, agents3):
    crew = services.crew_save(tenant=trio.globex, changes={"slug": "theirs", "name": "X"})
    with pytest.raises(Http404):
        services.crew_save(tenant=trio.acme, crew=crew, changes={"name": "Y"}, members=[])
    with pytest.raises(Http404):
        services.crew_delete(tenant=trio.acme, crew=crew)
    crew.refresh_from_db()
    assert crew.name == "X"
    services.crew_delete(tenant=trio.globex, crew=crew)
    assert not Crew.objects.exists()


# -- conversations and facts --------------------------------------------------------------
def test_conversation_save_sets_tenant_and_owner(trio, agents3):
    conversation = services.conversation_save(
        tenant=trio.acme,
        changes={"agent": agents3[0], "title": "Hello"},
        owner_user=trio.alice,
    )
    assert conversation.tenant_id == trio.acme.pk
    assert conversation.owner_user_id == trio.alice.pk and conversation.owner_api_key_id is None
    services.conversation_save(
        tenant=trio.acme, conversation=conversation, changes={"title": "Renamed"}
    )
    conversation.refresh_from_db()
    assert conversation.title == "Renamed" and conversation.owner_user_id == trio.alice.pk


def test_conversation_invalid_or_foreign_is_refused(trio, agents3):
    with pytest.raises(ValidationError):
        services.conversation_save(
            tenant=trio.acme, changes={"agent": agents3[0], "title": "x" * 201}
        )
    outsider = services.agent_save(tenant=trio.globex, changes={"slug": "out", "name": "Out"})
    with pytest.raises(ValidationError):
        services.conversation_save(tenant=trio.acme, changes={"agent": outsider})
    assert not Conversation.objects.exists()
    theirs = services.conversation_save(tenant=trio.globex, changes={"agent": outsider})
    with pytest.raises(Http404):
        services.conversation_save(tenant=trio.acme, conversation=theirs, changes={"title": "T"})
    with pytest.raises(Http404):
        services.conversation_delete(tenant=trio.acme, conversation=theirs)
    theirs.refresh_from_db()
    assert theirs.title == ""
    services.conversation_delete(tenant=trio.globex, conversation=theirs)
    assert not Conversation.objects.exists()


# -- the shared helper ------------------------------------------------------------------
def test_save_validated_runs_hooks_in_one_transaction(trio):
    calls = []

    def after(agent: Agent) -> None:
        calls.append(agent.pk)
        raise RuntimeError("after failed")

    agent = Agent(tenant=trio.acme)
    with pytest.raises(RuntimeError):
        save_validated(
            agent, {"slug": "x", "name": "X"}, before=lambda a: calls.append("before"), after=after
        )
    assert calls[0] == "before" and calls[1] is not None
    assert not Agent.objects.exists()  # rolled back with the failing hook


# -- the API answers a lost race with 409, as before ------------------------------------
def test_the_api_answers_a_save_conflict_with_409(trio, client, skip_constraint_checks):
    from tests.api.test_resources import Api, key_for

    api = Api(client, key_for(trio.acme))
    assert api.post("/agents", {"slug": "dup", "name": "One"}).status_code == 201
    skip_constraint_checks(Agent)
    response = api.post("/agents", {"slug": "dup", "name": "Two"})
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": "It changed meanwhile (a duplicate name or slug); retry.",
        "details": {},
    }
