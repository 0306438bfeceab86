"""Runs, approvals inbox and usage pages: visibility by role, tenant isolation, filters,
deciding approvals, usage figures on a known data set, and escaping of run output."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from agentplatform.web.activity.charts import nice_ceiling, stacked_daily_bars, whole_tick
from agentplatform.web.activity.usage import Period, usage_for
from agents.models import Approval, Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from tenancy.models import Role
from tenancy.services import api_key_create
from tests.conftest import PAY_SECRET
from tests.factories import add_member, login, make_agent, make_approval, make_user
from tests.fakes.provider_server import ToolCall, ToolCallReply


def make_run(
    tenant,
    *,
    agent=None,
    user=None,
    status="succeeded",
    created=None,
    seconds=None,
    events=(),
    **fields,
) -> Run:
    """A run row with its events (type, payload) numbered from 1, as the runtime writes
    them. `created` backdates it; `seconds` sets started_at/finished_at that far apart."""
    run = Run.objects.create(
        tenant=tenant,
        agent=agent,
        initiated_by_user=user,
        status=status,
        correlation_id=uuid.uuid4().hex,
        **fields,
    )
    created = created or run.created_at
    changes = {"created_at": created}
    if seconds is not None:
        changes |= {"started_at": created, "finished_at": created + timedelta(seconds=seconds)}
    Run.objects.filter(pk=run.pk).update(**changes)
    for seq, (type_, payload) in enumerate(events, start=1):
        RunEvent.objects.create(tenant=tenant, run=run, seq=seq, type=type_, payload=payload)
    RunEvent.objects.filter(run=run).update(created_at=created)
    run.refresh_from_db()
    return run


def tool_run_events(call_id="c1", *, result=None, error=None, approval_call="c2"):
    """The events of a run that called `lookup` and then parked on `transfer`."""
    usage = {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    calls = [
        {"call_id": call_id, "name": "lookup", "arguments": {"q": "weather"}},
        {"call_id": approval_call, "name": "transfer", "arguments": {"amount": 500, "to": "bob"}},
    ]
    return [
        ("run.started", {"model": "gpt-test", "agent": "Assistant"}),
        ("inference.started", {"round": 1}),
        (
            "inference.completed",
            {
                "round": 1,
                "text": "",
                "tool_calls": calls,
                "usage": usage,
                "model": "gpt-test",
                "latency_ms": 812.4,
            },
        ),
        ("tool.started", calls[0]),
        (
            "tool.completed",
            {
                "call_id": call_id,
                "name": "lookup",
                "result": result,
                "error": error,
                "latency_ms": 42.5,
            },
        ),
        ("approval.required", calls[1]),
    ]


def pending_approval(run, call_id="c2", tool="transfer", arguments=None) -> Approval:
    """The approval `tool_run_events` parks on (c2, transfer), unless told otherwise."""
    return make_approval(run, tool, call_id, arguments=arguments or {"amount": 500, "to": "bob"})


@pytest.fixture
def runs(trio):
    """bob's run, alice's run, an API key's run in acme; charlie's run in globex."""
    agent = make_agent(trio.acme)
    key, _ = api_key_create(tenant=trio.acme, name="ci", scopes=["run"])
    return {
        "bob": make_run(trio.acme, agent=agent, user=trio.bob, input="bob asks"),
        "alice": make_run(trio.acme, agent=agent, user=trio.alice, input="alice asks"),
        "key": make_run(trio.acme, agent=agent, initiated_by_api_key=key, input="ci asks"),
        "globex": make_run(trio.globex, agent=make_agent(trio.globex), user=trio.charlie),
    }


# -- visibility ------------------------------------------------------------------------
def test_members_see_only_the_runs_they_started(client, trio, runs):
    body = login(client, trio.bob).get("/t/acme/runs/").content.decode()
    assert f"#{runs['bob'].pk}<" in body
    assert f"#{runs['alice'].pk}<" not in body and f"#{runs['key'].pk}<" not in body
    assert client.get(f"/t/acme/runs/{runs['bob'].pk}/").status_code == 200
    assert client.get(f"/t/acme/runs/{runs['alice'].pk}/").status_code == 404


def test_owners_see_every_run_of_the_tenant_and_nothing_of_others(client, trio, runs):
    body = login(client, trio.alice).get("/t/acme/runs/").content.decode()
    for name in ("bob", "alice", "key"):
        assert f"#{runs[name].pk}<" in body
    assert f"#{runs['globex'].pk}<" not in body
    assert client.get(f"/t/acme/runs/{runs['key'].pk}/").status_code == 200
    assert client.get(f"/t/acme/runs/{runs['globex'].pk}/").status_code == 404


def test_another_tenants_run_and_approval_ids_answer_404(client, trio, runs):
    approval = pending_approval(runs["globex"])
    login(client, trio.alice)
    assert client.get(f"/t/acme/runs/{runs['globex'].pk}/").status_code == 404
    response = client.post(f"/t/acme/approvals/{approval.pk}/decide/", {"decision": "approve"})
    assert response.status_code == 404
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    login(client, trio.charlie)
    assert client.get(f"/t/acme/runs/{runs['bob'].pk}/").status_code == 404
    assert client.get("/t/acme/approvals/").status_code == 404


def test_child_runs_are_listed_in_their_run_page_not_in_the_list(client, trio, runs):
    child = make_run(
        trio.acme,
        agent=runs["bob"].agent,
        user=trio.bob,
        parent=runs["bob"],
        child_key="step-1",
        depth=1,
    )
    login(client, trio.bob)
    assert f"#{child.pk}<" not in client.get("/t/acme/runs/").content.decode()
    body = client.get(f"/t/acme/runs/{runs['bob'].pk}/").content.decode()
    assert f'href="/t/acme/runs/{child.pk}/"' in body and "step-1" in body
    body = client.get(f"/t/acme/runs/{child.pk}/").content.decode()
    assert f'href="/t/acme/runs/{runs["bob"].pk}/"' in body  # back to its parent


# -- filters and pagination -----------------------------------------------------------
def test_the_list_filters_by_agent_status_and_dates(client, trio):
    first, second = make_agent(trio.acme), make_agent(trio.acme, "writer")
    now = timezone.now()
    old = make_run(trio.acme, agent=first, user=trio.alice, created=now - timedelta(days=10))
    failed = make_run(trio.acme, agent=second, user=trio.alice, status="failed")
    ok = make_run(trio.acme, agent=second, user=trio.alice)
    login(client, trio.alice)

    def shown(query: str) -> set[int]:
        body = client.get(f"/t/acme/runs/?{query}").content.decode()
        return {run.pk for run in (old, failed, ok) if f"#{run.pk}<" in body}

    assert shown("") == {old.pk, failed.pk, ok.pk}
    assert shown("agent=writer") == {failed.pk, ok.pk}
    assert shown("status=failed") == {failed.pk}
    assert shown("agent=writer&status=succeeded") == {ok.pk}
    today = timezone.localdate()
    assert shown(f"since={today - timedelta(days=3)}") == {failed.pk, ok.pk}
    assert shown(f"until={today - timedelta(days=3)}") == {old.pk}
    body = client.get(f"/t/acme/runs/?since={today}&until={today - timedelta(days=1)}")
    assert "must not be after" in body.content.decode()


def test_htmx_gets_only_the_results_newest_first_and_pages(client, trio):
    agent = make_agent(trio.acme)
    made = [make_run(trio.acme, agent=agent, user=trio.alice) for _ in range(27)]
    login(client, trio.alice)
    response = client.get("/t/acme/runs/", headers={"HX-Request": "true"})
    body = response.content.decode()
    assert "HX-Request" in response["Vary"]
    assert body.lstrip().startswith('<div id="run-results"') and "<html" not in body
    assert body.index(f"#{made[-1].pk}<") < body.index(f"#{made[-2].pk}<")  # newest first
    assert f"#{made[0].pk}<" not in body and "Page 1 of 2" in body
    body = client.get("/t/acme/runs/?page=2").content.decode()
    assert f"#{made[0].pk}<" in body and f"#{made[-1].pk}<" not in body


# -- the run page ---------------------------------------------------------------------
def test_the_timeline_shows_model_calls_tools_approvals_and_errors(client, trio):
    agent = make_agent(trio.acme)
    events = tool_run_events(error="lookup service down")
    events.append(("run.failed", {"status": "failed", "error": "provider exploded", "rounds": 1}))
    run = make_run(
        trio.acme,
        agent=agent,
        user=trio.bob,
        status="failed",
        events=events,
        error="provider exploded",
    )
    approval = pending_approval(run)
    approval.status, approval.decided_by_label, approval.reason = "rejected", "alice", "Too much"
    approval.save()
    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Model call" in body and "120 tokens in" in body and "812 ms" in body
    assert "Tool call <code>lookup</code>" in body and "42.5 ms" in body
    assert "&quot;q&quot;: &quot;weather&quot;" in body and "lookup service down" in body
    assert "Approval required for <code>transfer</code>" in body
    assert "<strong>alice</strong>" in body and "Too much" in body
    assert "Run failed" in body and "provider exploded" in body


def test_the_timeline_shows_the_tools_each_round_offered(client, trio):
    offered = {"round": 1, "tools": ["get_weather_forecast", "search_tools"], "routed": [],
               "found": [], "of": 1010}  # fmt: skip
    run = make_run(trio.acme, agent=make_agent(trio.acme), user=trio.bob, status="running",
                   events=[("tools.offered", offered)])  # fmt: skip
    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Tools offered" in body and "2 of 1010 tools" in body
    assert "<code>get_weather_forecast</code>" in body


def test_the_timeline_reads_fallbacks_and_quota_refusals_in_words(client, trio):
    refusal = "Quota exceeded: the daily limit of 3,000 tokens for the tenant <b>is used up</b>."
    events = [
        ("provider.fallback", {"from": "Primary/gpt-4o", "to": "Backup/gpt-4o",
                               "reason": "the provider answered HTTP 503"}),
        ("tool.quota_exceeded", {"call_id": "l1", "name": "llm", "message": refusal}),
    ]  # fmt: skip
    run = make_run(trio.acme, agent=make_agent(trio.acme), user=trio.bob, events=events)
    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Provider fallback" in body and "Primary/gpt-4o → Backup/gpt-4o" in body
    assert "the provider answered HTTP 503" in body
    assert "Quota refused a model call of <code>llm</code>" in body
    assert "&lt;b&gt;is used up&lt;/b&gt;" in body and "<b>is used up" not in body


def test_output_and_tool_results_are_escaped(client, trio):
    attack = "<script>alert(1)</script>"
    run = make_run(
        trio.acme,
        agent=make_agent(trio.acme),
        user=trio.alice,
        output=attack,
        events=tool_run_events(result={"html": attack}),
    )
    body = login(client, trio.alice).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert attack not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert body.count("&lt;script&gt;") >= 2  # the output and the tool result


def test_a_real_run_with_a_tool_call_and_an_approval_renders(
    client, trio, agent, provider_server, transfer
):
    from agents.runs import run_inline
    from tests.fakes.provider_server import ToolCall, ToolCallReply

    provider_server.script(
        "openai",
        ToolCallReply(
            [
                ToolCall("k1", "calculator", '{"expression": "6 * 7"}'),
                ToolCall("t1", "transfer", '{"amount": 500, "to": "bob"}'),
            ]
        ),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="pay bob", initiated_by=trio.bob)
    assert run.status == "awaiting_approval", run.error
    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Tool call <code>calculator</code>" in body and "42" in body
    assert "Approval required for <code>transfer</code>" in body
    assert 'name="decision" value="approve"' in body  # bob may decide in place


# -- approvals ------------------------------------------------------------------------
@pytest.fixture
def parked(trio):
    agent = make_agent(trio.acme)
    bobs = make_run(trio.acme, agent=agent, user=trio.bob, status="awaiting_approval")
    alices = make_run(trio.acme, agent=agent, user=trio.alice, status="awaiting_approval")
    return pending_approval(bobs), pending_approval(alices, tool="delete_all")


def test_the_inbox_lists_the_approvals_a_user_may_see(client, trio, parked):
    body = login(client, trio.bob).get("/t/acme/approvals/").content.decode()
    assert f'id="approval-{parked[0].pk}"' in body and f'id="approval-{parked[1].pk}"' not in body
    body = login(client, trio.alice).get("/t/acme/approvals/").content.decode()
    assert f'id="approval-{parked[0].pk}"' in body and f'id="approval-{parked[1].pk}"' in body


def test_approving_through_the_inbox_with_htmx_resumes_the_run(client, trio, parked):
    mine, _ = parked
    login(client, trio.bob)
    response = client.post(
        f"/t/acme/approvals/{mine.pk}/decide/",
        {"decision": "approve", "reason": "fine by me"},
        headers={"HX-Request": "true"},
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert "Approved by <strong>bob</strong>" in body and "fine by me" in body
    assert 'id="pending-count" hx-swap-oob="true">0</span>' in body  # bob's inbox: empty now
    mine.refresh_from_db()
    assert (mine.status, mine.decided_by, mine.reason) == ("approved", trio.bob, "fine by me")
    assert Run.objects.get(pk=mine.run_id).status == "queued"  # queued to resume
    body = client.get("/t/acme/approvals/").content.decode()
    assert "Nothing is waiting" in body and "fine by me" in body  # now recently decided
    again = client.post(
        f"/t/acme/approvals/{mine.pk}/decide/",
        {"decision": "reject"},
        headers={"HX-Request": "true"},
    )
    assert "already approved" in again.content.decode()


def test_rejecting_without_javascript_redirects_back(client, trio, parked):
    mine, _ = parked
    login(client, trio.bob)
    response = client.post(
        f"/t/acme/approvals/{mine.pk}/decide/",
        {"decision": "reject", "reason": "No.", "next": f"/t/acme/runs/{mine.run_id}/"},
    )
    assert response.status_code == 302 and response["Location"] == f"/t/acme/runs/{mine.run_id}/"
    mine.refresh_from_db()
    assert (mine.status, mine.decided_by_label, mine.reason) == ("rejected", "bob", "No.")
    response = client.post(
        f"/t/acme/approvals/{mine.pk}/decide/",
        {"decision": "reject", "next": "https://evil.example/"},
    )
    assert response["Location"] == "/t/acme/approvals/"


def test_viewers_see_but_may_not_decide(client, trio):
    dora = make_user("dora")
    add_member(trio.acme, dora, Role.VIEWER)
    run = make_run(trio.acme, agent=make_agent(trio.acme), user=dora, status="awaiting_approval")
    approval = pending_approval(run)
    login(client, dora)
    body = client.get("/t/acme/approvals/").content.decode()
    assert f'id="approval-{approval.pk}"' in body and 'value="approve"' not in body
    response = client.post(f"/t/acme/approvals/{approval.pk}/decide/", {"decision": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_members_may_not_decide_approvals_of_runs_they_cannot_see(client, trio, parked):
    _, alices = parked
    response = login(client, trio.bob).post(
        f"/t/acme/approvals/{alices.pk}/decide/", {"decision": "approve"}
    )
    assert response.status_code == 404
    assert Approval.objects.get(pk=alices.pk).status == "pending"


# -- usage ----------------------------------------------------------------------------
@pytest.fixture
def known_usage(trio):
    """Three runs of Assistant: two today (1 s, 2 s) and one yesterday (10 s); three tool
    calls yesterday (lookup ok, lookup error, search ok). Plus noise that must not count."""
    agent = make_agent(trio.acme)
    now = timezone.now()
    yesterday = now - timedelta(days=1)
    make_run(
        trio.acme,
        agent=agent,
        user=trio.alice,
        seconds=1,
        input_tokens=100,
        output_tokens=50,
        created=now,
    )
    make_run(
        trio.acme,
        agent=agent,
        user=trio.bob,
        seconds=2,
        input_tokens=200,
        output_tokens=20,
        created=now,
    )
    make_run(
        trio.acme,
        agent=agent,
        user=trio.alice,
        seconds=10,
        input_tokens=10,
        output_tokens=5,
        created=yesterday,
        events=[
            ("tool.completed", {"call_id": "a", "name": "lookup", "result": 1, "error": None}),
            (
                "tool.completed",
                {"call_id": "b", "name": "lookup", "result": None, "error": "timed out"},
            ),
            ("tool.completed", {"call_id": "c", "name": "search", "result": [], "error": None}),
        ],
    )
    make_run(
        trio.acme,
        agent=agent,
        user=trio.alice,
        seconds=99,
        input_tokens=9999,
        created=now - timedelta(days=40),
    )  # outside 30 days
    make_run(
        trio.globex, agent=make_agent(trio.globex), user=trio.charlie, seconds=50, input_tokens=7777
    )  # another tenant
    return agent


def test_usage_figures_on_a_known_data_set(trio, known_usage, rf):
    period = Period.ending_today(7)
    usage = usage_for(Run.objects.filter(tenant=trio.acme), period)
    assert usage.runs.labels == ["Assistant"]
    assert usage.runs.totals == [0, 0, 0, 0, 0, 1, 2]
    assert usage.tokens.totals == [0, 0, 0, 0, 0, 15, 370]
    assert (usage.input_tokens, usage.output_tokens) == (310, 75)
    [latency] = usage.latency
    assert (latency.runs, latency.p50_s, round(latency.p95_s, 6)) == (3, 2.0, 9.2)
    assert [(t.name, t.calls, t.errors) for t in usage.tools] == [
        ("lookup", 2, 1),
        ("search", 1, 0),
    ]


def test_the_usage_page_shows_the_figures_and_svg_charts(client, trio, known_usage):
    body = login(client, trio.alice).get("/t/acme/usage/?days=7").content.decode()
    assert '<dd id="total-runs">3</dd>' in body
    assert '<dd id="total-input">310</dd>' in body and '<dd id="total-output">75</dd>' in body
    assert body.count('<svg class="chart-svg"') == 4 and "<title" in body
    assert 'role="img"' in body and "Runs per day, the last 7 days" in body
    assert '<td class="num">370</td>' in body  # today's tokens in the data table
    assert "2.00 s" in body and "9.20 s" in body  # p50, p95
    assert "50.0%" in body and "0.0%" in body  # lookup, search
    assert "style=" not in body  # the CSP forbids style attributes
    # bob, a member, sees his own run only
    body = login(client, trio.bob).get("/t/acme/usage/?days=7").content.decode()
    assert '<dd id="total-runs">1</dd>' in body and '<dd id="total-input">200</dd>' in body


def test_the_usage_period_defaults_to_30_days_and_counts_runs_within_it(client, trio, known_usage):
    login(client, trio.alice)
    assert '<dd id="total-runs">3</dd>' in client.get("/t/acme/usage/?days=bogus").content.decode()
    assert '<dd id="total-runs">4</dd>' in client.get("/t/acme/usage/?days=90").content.decode()


def test_count_ticks_are_whole_numbers():
    today = timezone.localdate()
    for most in (1, 5, 9, 13, 170):
        chart = stacked_daily_bars(
            title="t", description="d", dates=[today], labels=["a"], values=[[most]], unit="runs"
        )
        ticks = [tick.text for tick in chart.y_ticks]
        assert all(t.isdigit() for t in ticks), (most, ticks)
        assert int(ticks[-1]) >= most, (most, ticks)


def test_stacked_bars_scale_to_a_nice_maximum():
    assert [nice_ceiling(v) for v in (0, 3, 7, 12, 370)] == [1, 5, 10, 20, 500]
    assert [whole_tick(v) for v in (0, 1.25, 3, 7, 12, 370)] == [1, 2, 5, 10, 20, 500]
    today = timezone.localdate()
    chart = stacked_daily_bars(
        title="t",
        description="d",
        dates=[today, today],
        labels=["a", "b"],
        values=[[1, 0], [1, 2]],
        unit="runs",
    )
    assert [tick.text for tick in chart.y_ticks] == ["0", "1", "2", "3", "4"]
    first_a, first_b, second_b = chart.bars
    assert first_a.height == first_b.height == second_b.height / 2
    assert first_b.y + first_b.height == first_a.y  # b sits on top of a
    assert [bar.css for bar in chart.bars] == ["series-0", "series-1", "series-1"]


@pytest.mark.django_db(transaction=True)
def test_the_inbox_and_the_run_show_the_exact_request_and_an_edit_asks_again(
    client, trio, agent, provider_server, pay
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("p1", "pay", '{"amount": 500, "to": "bob"}')])
    )
    run = run_start(
        tenant=trio.acme, agent=agent, input="pay", initiated_by=trio.bob, enqueue=False
    )
    execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    login(client, trio.bob)
    inbox = client.get("/t/acme/approvals/").content.decode()
    assert f"POST {pay.url}/payments/bob" in inbox and "Authorization: Bearer ***" in inbox
    assert PAY_SECRET not in inbox

    hx = {"HX-Request": "true"}
    decide = f"/t/acme/approvals/{approval.pk}/decide/"
    bad = client.post(decide, {"decision": "approve", "arguments": "[1]"}, headers=hx)
    assert "JSON object" in bad.content.decode()
    edit = {"decision": "approve", "arguments": '{"amount": 5, "to": "bob"}'}
    body = client.post(decide, edit, headers=hx).content.decode()
    approval.refresh_from_db()
    again = approval.replaced_by
    assert approval.status == "edited" and pay.requests == []
    assert f'id="approval-{again.pk}"' in body and "{&quot;amount&quot;:5}" in body
    assert "Nothing was sent" in body and PAY_SECRET not in body

    detail = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert f'id="approval-{approval.pk}"' in detail and f'id="approval-{again.pk}"' in detail
    assert "{&quot;amount&quot;:5}" in detail and PAY_SECRET not in detail
