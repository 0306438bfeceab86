"""REST for evaluations: datasets and cases (config), evaluations started, read and
compared, and feedback on a run that adds the exchange to a dataset. Bad input is a 400
naming the field, another tenant's objects a 404."""

from __future__ import annotations

import pytest

from agents.evaluations import evaluation_run_to_end
from agents.models import Case, Evaluation, Feedback, Verification
from agents.runs import run_start
from tests.agents.test_confirmation import settle
from tests.api.test_resources import as_key, assert_error
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def test_datasets_and_cases_over_rest(client, trio, connection):
    api = as_key(client, trio.acme, "read", "config")
    made = api.post("/datasets", {"name": "support", "description": "Questions."})
    assert made.status_code == 201, made.content
    dataset = made.json()["id"]
    assert api.get("/datasets").json()["results"][0]["name"] == "support"
    assert "name" in assert_error(api.post("/datasets", {"name": "support"}), 400)["details"]
    assert_error(api.post("/datasets", {"name": "Not A Slug"}), 400)
    assert_error(api.post("/datasets", {}), 400)
    changed = api.patch(
        f"/datasets/{dataset}", {"judge_connection": connection.pk, "judge_model": "j"}
    )
    assert changed.status_code == 200 and changed.json()["judge_connection"] == connection.pk
    assert_error(api.patch(f"/datasets/{dataset}", {"judge_connection": 999999}), 400)

    case = api.post(
        f"/datasets/{dataset}/cases", {"input": "refund?", "expect": {"judge": "Apologises."}}
    )
    assert case.status_code == 201, case.content
    case_id = case.json()["id"]
    for bad in [{"input": "x", "expect": {"regex": "(a"}}, {"input": "x", "expect": []},
                {"input": "x"}, {"input": "x", "expect": {"nope": 1}}, {"extra": 1}]:  # fmt: skip
        assert_error(api.post(f"/datasets/{dataset}/cases", bad), 400)
    edited = api.patch(f"/datasets/{dataset}/cases/{case_id}", {"expect": {"contains": "sorry"}})
    assert edited.json()["expect"] == {"contains": "sorry"}
    assert [c["id"] for c in api.get(f"/datasets/{dataset}/cases").json()["results"]] == [case_id]

    other = as_key(client, trio.globex, "read", "config")
    assert_error(other.get(f"/datasets/{dataset}"), 404)
    assert_error(other.get(f"/datasets/{dataset}/cases/{case_id}"), 404)
    assert_error(other.patch(f"/datasets/{dataset}/cases/{case_id}", {"name": "x"}), 404)
    reader = as_key(client, trio.acme, "read")
    assert_error(reader.post("/datasets", {"name": "mine"}), 403)
    assert api.delete(f"/datasets/{dataset}/cases/{case_id}").status_code == 204
    assert not Case.objects.exists()


def test_evaluations_over_rest_start_read_and_compare(
    client, trio, agent, provider_server, settings
):
    settings.EVALUATION_CONCURRENCY = 1
    api = as_key(client, trio.acme, "read", "config", "run")
    dataset = api.post("/datasets", {"name": "facts"}).json()["id"]
    api.post(f"/datasets/{dataset}/cases", {"input": "capital?", "expect": {"exact": "Paris"}})
    started = api.post("/evaluations", {"dataset": "facts", "agent": "assistant"})
    assert started.status_code == 201, started.content
    assert started.json()["status"] == "running" and started.json()["cases"] == 1
    provider_server.script("openai", TextReply("Paris"), TextReply("Lyon"))
    first = evaluation_run_to_end(Evaluation.objects.get(pk=started.json()["id"]))
    second_id = api.post("/evaluations", {"dataset": str(dataset), "agent": "assistant"}).json()[
        "id"
    ]
    evaluation_run_to_end(Evaluation.objects.get(pk=second_id))

    shown = api.get(f"/evaluations/{first.pk}").json()
    assert (shown["status"], shown["passed"], shown["score"]) == ("completed", 1, 1.0)
    [result] = shown["results"]
    assert result["outcome"] == "passed" and result["run"] and result["output"] == "Paris"
    assert api.get(f"/runs/{result['run']}").json()["verifications"][0]["source"] == "evaluation"
    compared = api.get(f"/evaluations/{first.pk}/compare/{second_id}").json()
    [row] = compared["cases"]
    assert (row["left"]["outcome"], row["right"]["outcome"], row["changed"]) == (
        "passed", "failed", True,
    )  # fmt: skip
    assert compared["left"]["passed"] == 1 and compared["right"]["failed"] == 1
    assert len(api.get("/evaluations").json()["results"]) == 2

    assert_error(api.post("/evaluations", {"dataset": "nope", "agent": "assistant"}), 404)
    assert_error(api.post("/evaluations", {"dataset": "facts", "agent": "nobody"}), 404)
    assert_error(api.post("/evaluations", {"dataset": "facts"}), 400)
    api.post("/datasets", {"name": "empty"})
    assert_error(api.post("/evaluations", {"dataset": "empty", "agent": "assistant"}), 400)
    other = as_key(client, trio.globex, "read", "run")
    assert_error(other.get(f"/evaluations/{first.pk}"), 404)
    assert_error(api.get("/evaluations/abc"), 404)


def test_feedback_over_rest_adds_the_exchange_to_a_dataset(client, trio, agent, provider_server):
    api = as_key(client, trio.acme, "read", "write", "run", "config")
    api.post("/datasets", {"name": "chat"})
    provider_server.script("openai", TextReply("It ships tomorrow."))
    run = settle(run_start(tenant=trio.acme, agent=agent, input="when?", initiated_by=trio.alice))
    # A key made by no one is an owner's: an admin's feedback on any run.
    given = api.post(
        f"/runs/{run.pk}/feedback",
        {"rating": "up", "note": "Right", "add_to_dataset": "chat", "match": "exact"},
    )
    assert given.status_code == 201, given.content
    assert given.json()["rating"] == "up" and given.json()["added_case"]
    case = Case.objects.get(pk=given.json()["added_case"])
    assert case.expect == {"exact": "It ships tomorrow."} and case.input == "when?"
    assert api.post(f"/runs/{run.pk}/feedback", {"rating": "down"}).status_code == 201
    assert Feedback.objects.get().rating == "down"
    assert_error(api.post(f"/runs/{run.pk}/feedback", {"rating": "meh"}), 400)
    assert_error(api.post(f"/runs/{run.pk}/feedback", {"rating": "up", "add_to_dataset": "x"}), 404)
    other = as_key(client, trio.globex, "read", "run")
    assert_error(other.post(f"/runs/{run.pk}/feedback", {"rating": "up"}), 404)
    assert not Verification.objects.exists()  # feedback is not a verdict


def test_an_evaluation_is_stopped_by_its_starter_or_an_admin(client, trio, agent, settings):
    from agents.evaluations import case_save, dataset_save, evaluation_advance, evaluation_start
    from tenancy.models import Role
    from tests.factories import add_member, login, make_user

    settings.EVALUATION_CONCURRENCY = 1
    dataset = dataset_save(tenant=trio.acme, changes={"name": "long"})
    for n in range(3):
        case_save(
            tenant=trio.acme,
            dataset=dataset,
            changes={"input": f"q{n}", "expect": {"succeeds": True}},
        )
    evaluation = evaluation_start(
        tenant=trio.acme, dataset=dataset, agent=agent, by=trio.bob, dispatch=False
    )
    evaluation_advance(evaluation)  # one case started (not executed)

    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    login(client, carol)  # neither the starter nor an admin: cannot see it
    stop = f"/t/acme/evaluations/{evaluation.pk}/cancel/"
    assert client.post(stop).status_code == 404
    login(client, trio.bob)
    assert client.post(stop).status_code == 302
    evaluation.refresh_from_db()
    assert evaluation.status == "cancelled"
    evaluation = evaluation_advance(evaluation)  # stopped: nothing more starts
    assert evaluation.results.filter(outcome="pending").count() == 2
    # The one started runs on (a session's worker may even have finished it meanwhile).
    assert evaluation.results.exclude(outcome="pending").count() == 1

    api = as_key(client, trio.acme, "read", "run")
    stopped = api.post(f"/evaluations/{evaluation.pk}/cancel")  # an owner's key: admin
    assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled"
    assert_error(
        as_key(client, trio.globex, "read", "run").post(f"/evaluations/{evaluation.pk}/cancel"), 404
    )
    assert_error(
        as_key(client, trio.acme, "read").post(f"/evaluations/{evaluation.pk}/cancel"), 403
    )
