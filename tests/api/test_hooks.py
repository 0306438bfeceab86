"""POST /hooks/<public id> (agentplatform/api/hooks.py): signed deliveries start runs; every
refusal has its status, never a 500."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client, override_settings

from agents.models import Run, Trigger
from agents.runtime.triggers import sign
from agents.triggers import trigger_save
from tenancy.models import Membership
from tenancy.policy import Principal
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook(trio):
    agent = make_agent(trio.acme, "triage")
    by = Principal.of_membership(Membership.objects.get(tenant=trio.acme, user=trio.alice))
    saved = trigger_save(
        tenant=trio.acme, by=by,
        changes={"name": "github", "kind": "webhook", "agent": agent,
                 "input_template": "Triage issue #{{payload.issue.number}}: "
                                   "{{payload.issue.title}} (labels {{payload.issue.labels}})"},
    )  # fmt: skip
    return saved.trigger, saved.secret


def deliver(trigger, secret, payload=None, *, body=None, timestamp=None, signature=None, **extra):
    body = body if body is not None else json.dumps(payload or {}).encode()
    timestamp = str(int(time.time())) if timestamp is None else timestamp
    headers = {"HTTP_X_TRIGGER_TIMESTAMP": timestamp}
    headers["HTTP_X_TRIGGER_SIGNATURE"] = signature or sign(secret, timestamp, body)
    return Client().post(
        f"/hooks/{trigger.public_id}", body, content_type="application/json", **headers, **extra
    )


ISSUE = {"issue": {"number": 42, "title": "Login fails", "labels": ["bug"]}}


def test_a_signed_delivery_starts_a_run_with_the_payload_mapped(trio, hook):
    trigger, secret = hook
    response = deliver(trigger, secret, ISSUE)
    assert response.status_code == 202, response.content
    body = response.json()
    run = Run.objects.get(pk=body["run"])
    assert body == {"run": run.pk, "status": "queued", "replayed": False}
    assert run.trigger == trigger and run.initiated_by_user == trio.alice
    assert run.input == 'Triage issue #42: Login fails (labels ["bug"])'
    trigger.refresh_from_db()
    assert trigger.last_fired_at is not None and trigger.last_error == ""


def test_the_same_signed_delivery_again_is_the_same_run(hook):
    trigger, secret = hook
    timestamp = str(int(time.time()))
    first = deliver(trigger, secret, ISSUE, timestamp=timestamp)
    again = deliver(trigger, secret, ISSUE, timestamp=timestamp)
    assert again.status_code == 202 and again.json()["run"] == first.json()["run"]
    assert again.json()["replayed"] is True
    assert Run.objects.filter(trigger=trigger).count() == 1


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        ({"signature": "sha256=" + "0" * 64}, "does not match"),
        ({"signature": "garbage"}, "does not match"),
        ({"timestamp": str(int(time.time()) - 3600)}, "window"),  # replayed an hour later
        ({"timestamp": "soon"}, "Unix seconds"),
    ],
)
def test_bad_stale_or_replayed_signatures_are_401(hook, tamper, why):
    trigger, secret = hook
    if "timestamp" in tamper and "signature" not in tamper:
        body = json.dumps(ISSUE).encode()
        tamper["signature"] = sign(secret, "1700000000", body)  # a valid one of another time
    response = deliver(trigger, secret, ISSUE, **tamper)
    assert response.status_code == 401
    assert why in response.json()["error"]["message"]
    assert not Run.objects.exists()


def test_a_body_changed_after_signing_is_401(hook):
    trigger, secret = hook
    timestamp = str(int(time.time()))
    signature = sign(secret, timestamp, json.dumps(ISSUE).encode())
    response = deliver(
        trigger, secret, body=b'{"issue": {"title": "rm -rf"}}', timestamp=timestamp,
        signature=signature,
    )  # fmt: skip
    assert response.status_code == 401


def test_an_unsigned_delivery_is_401_and_a_rotated_secret_stops_the_old_one(trio, hook):
    trigger, secret = hook
    response = Client().post(f"/hooks/{trigger.public_id}", "{}", content_type="application/json")
    assert response.status_code == 401
    from agents.triggers import trigger_rotate_secret

    by = Principal.of_membership(Membership.objects.get(tenant=trio.acme, user=trio.alice))
    new = trigger_rotate_secret(tenant=trio.acme, by=by, trigger=trigger)
    assert deliver(trigger, secret, ISSUE).status_code == 401
    assert deliver(trigger, new, ISSUE).status_code == 202


def test_unknown_disabled_too_large_and_not_json(hook):
    trigger, secret = hook
    unknown = Client().post("/hooks/trg_" + "x" * 24, "{}", content_type="application/json")
    assert unknown.status_code == 404
    assert Client().post("/hooks/%00", "{}", content_type="application/json").status_code == 404
    assert Client().get(f"/hooks/{trigger.public_id}").status_code == 405
    not_json = deliver(trigger, secret, body=b"{not json")
    assert not_json.status_code == 400
    assert deliver(trigger, secret, body=b"\xff\xfe").status_code == 400
    deep = b"[" * 100_000 + b"]" * 100_000
    with override_settings(TRIGGER_WEBHOOK_MAX_BYTES=300_000):
        assert deliver(trigger, secret, body=deep).status_code == 400
    large = json.dumps({"x": "a" * 300_000}).encode()
    assert deliver(trigger, secret, body=large).status_code == 413
    Trigger.objects.filter(pk=trigger.pk).update(enabled=False)
    assert deliver(trigger, secret, ISSUE).status_code == 409
    assert not Run.objects.exists()


def test_a_mapped_input_that_is_empty_is_400_and_a_refused_run_is_409(hook):
    trigger, secret = hook
    Trigger.objects.filter(pk=trigger.pk).update(input_template="{{payload.text}}")
    assert deliver(trigger, secret, {"other": 1}).status_code == 400
    trigger.agent.active = False
    trigger.agent.save()
    refused = deliver(trigger, secret, {"text": "hello"})
    assert refused.status_code == 409 and "not active" in refused.json()["error"]["message"]
    trigger.refresh_from_db()
    assert "not active" in trigger.last_error


@override_settings(TRIGGER_WEBHOOK_RATE_PER_MIN=2)
def test_deliveries_beyond_the_rate_are_429(hook):
    trigger, secret = hook
    assert deliver(trigger, secret, {"issue": {"number": 1}}).status_code == 202
    assert deliver(trigger, secret, {"issue": {"number": 2}}).status_code == 202
    third = deliver(trigger, secret, {"issue": {"number": 3}})
    assert third.status_code == 429 and int(third["Retry-After"]) >= 1


@pytest.mark.django_db(transaction=True)
def test_over_real_http_a_signed_delivery_is_202_and_an_oversized_one_413(hook, asgi_server):
    """Through uvicorn (the ASGI app as deployed): the raw body as sent is what is signed."""
    import httpx2

    trigger, secret = hook
    body = json.dumps(ISSUE, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Trigger-Timestamp": timestamp,
        "X-Trigger-Signature": sign(secret, timestamp, body),
    }
    url = f"{asgi_server}/hooks/{trigger.public_id}"
    with httpx2.Client(timeout=20) as client:
        accepted = client.post(url, content=body, headers=headers)
        assert accepted.status_code == 202, accepted.text
        run = Run.objects.get(pk=accepted.json()["run"])
        assert run.trigger_id == trigger.pk and run.input.startswith("Triage issue #42")
        huge = b'{"x": "' + b"a" * 300_000 + b'"}'
        assert client.post(url, content=huge, headers=headers).status_code == 413
        assert client.post(url, content=body + b" ", headers=headers).status_code == 401
