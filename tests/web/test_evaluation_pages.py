"""The evaluation pages: datasets and cases edited by an admin (read by viewers, refused to
members), an evaluation started from the dataset page and its results, the side-by-side
comparison, the thumbs and "add to dataset" under a chat answer; and the command."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from agents.evaluations import (
    case_save,
    dataset_save,
    evaluation_run_to_end,
    evaluation_start,
)
from agents.models import Case, Conversation, Dataset, Evaluation, Feedback, Run
from agents.runs import run_start
from tenancy.models import Role
from tests.agents.test_confirmation import settle
from tests.factories import add_member, login, make_user
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def url(name: str, **kwargs) -> str:
    return reverse(f"activity:{name}", kwargs={"tenant_slug": "acme", **kwargs})


def test_an_admin_edits_datasets_and_cases_a_member_may_not(client, trio, agent):
    login(client, trio.alice)
    made = client.post(url("dataset_create"), {"name": "support", "description": "Q&A"})
    assert made.status_code == 302
    dataset = Dataset.objects.get(name="support")
    assert client.post(url("dataset_create"), {"name": "Bad Name"}).status_code == 400
    added = client.post(
        url("case_create", dataset_id=dataset.pk),
        {"input": "capital?", "kind": "exact", "value": "Paris"},
    )
    assert added.status_code == 302
    bad = client.post(
        url("case_create", dataset_id=dataset.pk), {"input": "x", "kind": "regex", "value": "(a"}
    )
    assert bad.status_code == 400 and "regex" in bad.content.decode()
    bad_schema = client.post(
        url("case_create", dataset_id=dataset.pk), {"input": "x", "kind": "schema", "value": "{"}
    )
    assert bad_schema.status_code == 400
    client.post(
        url("case_create", dataset_id=dataset.pk),
        {"input": "greet", "kind": "judge", "value": "Polite."},
    )
    case = Case.objects.get(input="capital?")
    assert case.expect == {"exact": "Paris"}
    edited = client.post(
        url("case_edit", dataset_id=dataset.pk, case_id=case.pk),
        {"input": "capital of France?", "kind": "contains", "value": "Paris"},
    )
    assert edited.status_code == 302
    case.refresh_from_db()
    assert (case.input, case.expect) == ("capital of France?", {"contains": "Paris"})
    page = client.get(url("dataset", dataset_id=dataset.pk)).content.decode()
    assert 'id="cases-table"' in page and "capital of France?" in page and "Run every case" in page

    login(client, trio.bob)  # a member: reads, may not change
    assert client.get(url("dataset", dataset_id=dataset.pk)).status_code == 200
    refused = client.post(url("case_create", dataset_id=dataset.pk), {"input": "x"})
    assert refused.status_code == 403
    login(client, trio.charlie)  # another tenant's
    assert client.get(url("dataset", dataset_id=dataset.pk)).status_code == 404


def test_an_evaluation_started_on_the_page_shows_results_and_compares(
    client, trio, agent, provider_server, settings
):
    settings.EVALUATION_CONCURRENCY = 1
    dataset = dataset_save(tenant=trio.acme, changes={"name": "facts"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": "capital?", "expect": {"exact": "Paris"}},
    )
    login(client, trio.alice)
    started = client.post(url("evaluation_create"), {"dataset": dataset.pk, "agent": "assistant"})
    assert started.status_code == 302
    first = Evaluation.objects.get()
    assert started["Location"] == url("evaluation", evaluation_id=first.pk)
    running = client.get(started["Location"]).content.decode()
    assert 'hx-trigger="every 2s"' in running  # refreshed while it runs
    provider_server.script("openai", TextReply("Paris"), TextReply("Lyon"))
    evaluation_run_to_end(first)
    second = evaluation_run_to_end(
        evaluation_start(
            tenant=trio.acme, dataset=dataset, agent=agent, by=trio.alice, dispatch=False
        )
    )
    page = client.get(url("evaluation", evaluation_id=first.pk)).content.decode()
    assert "1 passed, 0 failed, 0 errors of 1 cases" in page and "every 2s" not in page
    partial = client.get(url("evaluation", evaluation_id=first.pk), HTTP_HX_REQUEST="true")
    assert partial.content.decode().lstrip().startswith('<div id="evaluation-results"')
    compared = client.get(url("evaluation_compare", evaluation_id=first.pk), {"with": second.pk})
    body = compared.content.decode()
    assert compared.status_code == 200 and 'id="compare-table"' in body
    assert "1 / 1" in body and "0 / 1" in body and "changed" in body
    listing = client.get(url("evaluations")).content.decode()
    assert f"#{first.pk}" in listing and f"#{second.pk}" in listing

    login(client, trio.bob)  # a member sees only the evaluations they started
    assert client.get(url("evaluation", evaluation_id=first.pk)).status_code == 404
    login(client, trio.charlie)
    assert client.get(url("evaluation", evaluation_id=first.pk)).status_code == 404


def test_an_evaluation_past_the_members_request_budget_starts_nothing(client, trio, agent, rates):
    rates("0/min", None)
    dataset = dataset_save(tenant=trio.acme, changes={"name": "facts"})
    case_save(
        tenant=trio.acme, dataset=dataset, changes={"input": "capital?", "expect": {"exact": "P"}}
    )
    login(client, trio.alice)
    refused = client.post(url("evaluation_create"), {"dataset": dataset.pk, "agent": "assistant"})
    assert refused.status_code == 302
    assert refused["Location"] == url("dataset", dataset_id=dataset.pk)
    assert "Rate limit reached; retry in" in client.get(refused["Location"]).content.decode()
    assert not Evaluation.objects.exists() and not Run.objects.exists()


def test_thumbs_and_add_to_dataset_under_a_chat_answer(client, trio, agent, provider_server):
    dataset = dataset_save(tenant=trio.acme, changes={"name": "chat"})
    conversation = Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob, agent=agent)
    provider_server.script("openai", TextReply("Your order has shipped."))
    run = settle(
        run_start(
            tenant=trio.acme, agent=agent, input="my order?", conversation=conversation,
            initiated_by=trio.bob,
        )
    )  # fmt: skip
    login(client, trio.bob)
    chat = client.get(
        reverse(
            "chat:conversation", kwargs={"tenant_slug": "acme", "conversation_id": conversation.pk}
        )
    ).content.decode()
    assert f'id="feedback-{run.pk}"' in chat and url("run_feedback", run_id=run.pk) in chat
    block = client.get(url("run_feedback", run_id=run.pk), HTTP_HX_REQUEST="true").content.decode()
    assert 'value="up"' in block and "Add to dataset" in block

    rated = client.post(url("run_feedback", run_id=run.pk), {"rating": "down", "note": "vague"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    assert rated.status_code == 200 and "Thanks for the feedback." in rated.content.decode()
    assert Feedback.objects.get().rating == "down"
    assert client.post(url("run_feedback", run_id=run.pk), {"rating": "?"}).status_code == 400

    added = client.post(
        url("run_to_dataset", run_id=run.pk), {"dataset": dataset.pk, "match": "contains"},
        HTTP_HX_REQUEST="true",
    )  # fmt: skip
    assert added.status_code == 200 and "Added to dataset" in added.content.decode()
    case = Case.objects.get()
    assert (case.input, case.expect) == ("my order?", {"contains": "Your order has shipped."})
    assert client.post(url("run_to_dataset", run_id=run.pk), {"dataset": "x"}).status_code == 400

    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    login(client, carol)  # cannot see bob's run
    assert client.post(url("run_feedback", run_id=run.pk), {"rating": "up"}).status_code == 404
    assert (
        client.post(url("run_to_dataset", run_id=run.pk), {"dataset": dataset.pk}).status_code
        == 404
    )


def test_the_evaluate_command(trio, agent, provider_server, settings, capsys):
    settings.EVALUATION_CONCURRENCY = 1
    dataset = dataset_save(tenant=trio.acme, changes={"name": "facts"})
    for text, expect in [("capital?", {"exact": "Paris"}), ("colour?", {"contains": "blue"})]:
        case_save(tenant=trio.acme, dataset=dataset, changes={"input": text, "expect": expect})
    provider_server.script("openai", TextReply("Paris"), TextReply("red"))
    with pytest.raises(CommandError) as failed:
        call_command(
            "evaluate", "--tenant", "acme", "--dataset", "facts", "--agent", "assistant", "--wait"
        )
    assert failed.value.returncode == 1 and "1 case(s) did not pass" in str(failed.value)
    out = capsys.readouterr().out
    assert "1. passed" in out and "2. failed" in out and "expected it to contain 'blue'" in out
    assert "completed: 1 passed, 1 failed, 0 errors of 2" in out

    provider_server.script("openai", TextReply("Paris"), TextReply("blue"))
    call_command("evaluate", "--tenant", "acme", "--dataset", "facts", "--agent", "assistant",
                 "--wait", "--user", "bob")  # fmt: skip
    assert "completed: 2 passed" in capsys.readouterr().out
    assert Evaluation.objects.order_by("-id").first().started_by_user == trio.bob

    for args, why in [
        (["--tenant", "nope"], "No tenant"),
        (["--dataset", "nope"], "No dataset"),
        (["--agent", "nope"], "No agent"),
        (["--user", "charlie"], "No member"),
    ]:
        base = {"--tenant": "acme", "--dataset": "facts", "--agent": "assistant"}
        base.update(dict(zip(args[::2], args[1::2], strict=True)))
        flat = [part for pair in base.items() for part in pair]
        with pytest.raises(CommandError, match=why):
            call_command("evaluate", *flat)
