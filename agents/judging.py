"""A `judge` case's verdict: the dataset's judge connection (only ever one of the tenant's
own) and model, asked through agents.runtime.judge. Each call is recorded as a finished run
of that model (`gateway_model` `<connection>/<model>`), so the usage page counts the judge's
tokens with everything else; the evaluation's result keeps them too. With tracing on, the
call is a `chat <model>` span (with its cost), its own trace: no run's span is current."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.models import Dataset, Run
from agents.runtime.judge import MAX_TOKENS as JUDGE_MAX_TOKENS
from agents.runtime.judge import JudgeAnswerError, judge
from agents.runtime.spec import RunStatus
from providers.models import ProviderConnection
from providers.pricing import cost_of, price_for
from providers.runtime import tracing
from providers.runtime.errors import ProviderError, provider_failure
from providers.runtime.types import Usage
from providers.services import adapter_for, connection_handle, default_connection


@dataclass(frozen=True)
class JudgeOutcome:
    """passed None: no verdict (the judge could not be asked, or answered garbage); the
    reason says which."""

    passed: bool | None
    reason: str
    usage: Usage


def judge_connection(dataset: Dataset) -> ProviderConnection | None:
    chosen = dataset.judge_connection
    if chosen is not None and chosen.tenant_id == dataset.tenant_id:
        return chosen
    return default_connection(dataset.tenant)


def judge_answer(
    dataset: Dataset, *, rubric: str, input: str, answer: str, started_by_user_id=None
) -> JudgeOutcome:
    """One model call (never inside a transaction)."""
    connection = judge_connection(dataset)
    if connection is None or connection.tenant_id != dataset.tenant_id:
        return JudgeOutcome(None, "no judge: the tenant has no provider connection", Usage())
    model = dataset.judge_model or connection.default_model
    if not model:
        return JudgeOutcome(
            None, f"no judge model: connection {connection.name!r} has no default", Usage()
        )
    started = timezone.now()
    adapter = adapter_for(connection)
    error, usage, answered_by, reached = "", Usage(), model, True
    with _chat_span(dataset, connection, adapter.provider, model) as span:
        try:
            verdict = async_to_sync(judge)(
                adapter, model=model, rubric=rubric, input=input, answer=answer
            )
            outcome = JudgeOutcome(verdict.passed, verdict.reason, verdict.usage)
            usage, answered_by = verdict.usage, verdict.model
        except JudgeAnswerError as exc:  # (the model answered: its span is no failure)
            error, usage = str(exc), exc.usage
            outcome = JudgeOutcome(None, error, usage)
        except ProviderError as exc:
            error = f"the judge could not be asked: {provider_failure(exc, connection.name, model)}"
            outcome = JudgeOutcome(None, error, usage)
            span.fail(type(exc).__qualname__)
            reached = False
        price = price_for(dataset.tenant_id, connection.price_kind, model)
        cost = cost_of(price, usage.input_tokens, usage.output_tokens,
                       usage.cache_read_tokens, usage.cache_write_tokens)  # fmt: skip
        if reached:
            span.answered(answered_by, usage)
            span.set(**{"agentplatform.cost_usd": float(cost) if price else None})
    _record_call(dataset, connection, model, usage, cost, error, started, started_by_user_id)
    return outcome


def _chat_span(dataset: Dataset, connection: ProviderConnection, provider: str, model: str):
    """The judge's `chat <model>` span (OFF, and no query, with tracing off)."""
    if not tracing.enabled():
        return tracing.OFF
    return tracing.chat_span(
        provider=provider, model=model, tenant_id=dataset.tenant_id,
        max_tokens=JUDGE_MAX_TOKENS, temperature=0,
        agentplatform__tenant=dataset.tenant.slug, agentplatform__connection=connection.name,
        agentplatform__dataset__id=str(dataset.pk),
    )  # fmt: skip


def _record_call(dataset, connection, model, usage, cost, error, started, user_id) -> None:
    Run.objects.create(
        tenant_id=dataset.tenant_id,
        initiated_by_user_id=user_id,
        gateway_model=f"{connection_handle(connection)}/{model}"[:300],
        model=model[:200],
        provider=connection.kind[:100],
        status=RunStatus.FAILED if error else RunStatus.SUCCEEDED,
        error=error[:2000],
        input=f"Judge for dataset {dataset.name}"[:2000],
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=cost,
        total_cost_usd=cost,
        correlation_id=uuid.uuid4().hex,
        started_at=started,
        finished_at=timezone.now(),
    )
