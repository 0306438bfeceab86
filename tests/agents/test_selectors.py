"""Reads of the agents app (agents/selectors.py): another tenant's ids answer 404; a model
name is remembered per configuration version."""

from __future__ import annotations

import pytest
from django.http import Http404

from agents import runs, selectors
from agents.models import Conversation, Fact
from tests.factories import make_approval


def test_another_tenants_objects_answer_404_at_every_selector(trio, agent):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    conversation = Conversation.objects.create(tenant=trio.acme, agent=agent)
    approval = make_approval(run, "calculator")
    fact = Fact.objects.create(tenant=trio.acme, user=trio.alice, text="likes tea")
    assert selectors.run_get(tenant=trio.acme, run_id=run.pk) == run
    for call in (
        lambda: selectors.run_get(tenant=trio.globex, run_id=run.pk),
        lambda: selectors.conversation_get(tenant=trio.globex, conversation_id=conversation.pk),
        lambda: selectors.approval_get(tenant=trio.globex, approval_id=approval.pk),
        lambda: selectors.fact_get(tenant=trio.globex, fact_id=fact.pk),
        lambda: selectors.agent_get(tenant=trio.globex, slug="assistant"),
        lambda: selectors.run_get(tenant=trio.acme, run_id="not-a-number"),
    ):
        with pytest.raises(Http404):
            call()


@pytest.mark.django_db
def test_a_model_name_is_remembered_until_an_agent_or_crew_changes(
    trio, agent, django_assert_num_queries
):
    first = selectors.model_target(tenant=trio.acme, slug="assistant")
    with django_assert_num_queries(0):
        again = selectors.model_target(tenant=trio.acme, slug="assistant")
    assert again == first and again is not first  # a copy each time
    with pytest.raises(Http404):
        selectors.model_target(tenant=trio.globex, slug="assistant")  # another tenant's
    agent.active = False
    agent.save()
    with pytest.raises(Http404):
        selectors.model_target(tenant=trio.acme, slug="assistant")
