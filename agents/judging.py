"""A `judge` case's verdict: the dataset's judge connection (only ever one of the tenant's
own) and model, asked through agents.runtime.judge. Each call is held against the quotas of
the case's run (its tenant, member, key and agent: agents.quotas) and recorded as a finished
run of that model (`gateway_model` `<connection>/<model>`, of the same member and key), so the
usage page counts the judge's tokens with everything else; the evaluation's result keeps
them too. A refused call is not recorded: the model was never asked. With tracing on, the
call is a `chat <model>` span (with its cost), its own trace: no run's span is current."""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.utils import timezone

from agents import quotas
from agents.models import Dataset, Run
from agents.runs import record_model_call
from agents.runtime.judge import MAX_TOKENS as JUDGE_MAX_TOKENS
from agents.runtime.judge import JudgeAnswerError, judge
from providers.models import ProviderConnection
from providers.pricing import price_for
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
    refused: bool = False  # a quota refused the call: the reason is its message


def judge_connection(dataset: Dataset) -> ProviderConnection | None:
    chosen = dataset.judge_connection
    if chosen is not None and chosen.tenant_id == dataset.tenant_id:
        return chosen
    return default_connection(dataset.tenant)


def judge_answer(
    dataset: Dataset, *, rubric: str, input: str, answer: str, run: Run | None = None
) -> JudgeOutcome:
    """One model call (never inside a transaction), held against the quotas of `run` (the
    case's run; None: the tenant's only)."""
    connection = judge_connection(dataset)
    if connection is None or connection.tenant_id != dataset.tenant_id:
        return JudgeOutcome(None, "no judge: the tenant has no provider connection", Usage())
    model = dataset.judge_model or connection.default_model
    if not model:
        return JudgeOutcome(
            None, f"no judge model: connection {connection.name!r} has no default", Usage()
        )
    started = timezone.now()
    error, usage, answered_by, reached = "", Usage(), model, True
    meter = quotas.Meter.for_run(run) if run is not None else quotas.Meter(dataset.tenant_id)
    bare = adapter_for(connection)
    adapter = quotas.metered(bare, meter, price_kind=connection.price_kind)
    with _chat_span(dataset, connection, bare.provider, model) as span:
        try:
            verdict = async_to_sync(judge)(
                adapter, model=model, rubric=rubric, input=input, answer=answer
            )
            outcome = JudgeOutcome(verdict.passed, verdict.reason, verdict.usage)
            usage, answered_by = verdict.usage, verdict.model
        except quotas.QuotaExceeded as exc:  # (before ProviderError: it is one)
            span.fail(type(exc).__qualname__)
            return JudgeOutcome(None, str(exc), Usage(), refused=True)
        except JudgeAnswerError as exc:  # (the model answered: its span is no failure)
            error, usage = str(exc), exc.usage
            outcome = JudgeOutcome(None, error, usage)
        except ProviderError as exc:
            error = f"the judge could not be asked: {provider_failure(exc, connection.name, model)}"
            outcome = JudgeOutcome(None, error, usage)
            span.fail(type(exc).__qualname__)
            reached = False
        record = _record_call(dataset, connection, model, usage, error, started, run)
        if reached:
            span.answered(answered_by, usage)
            known = price_for(dataset.tenant_id, connection.price_kind, model) is not None
            span.set(**{"agentplatform.cost_usd": float(record.cost_usd) if known else None})
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


def _record_call(dataset, connection, model, usage, error, started, run: Run | None):
    """Its cost as its hold settled it (the same price kind, model and counts)."""
    return record_model_call(
        tenant_id=dataset.tenant_id,
        user_id=run.initiated_by_user_id if run is not None else None,
        api_key_id=run.initiated_by_api_key_id if run is not None else None,
        gateway_model=f"{connection_handle(connection)}/{model}",
        model=model,
        provider=connection.kind,
        price_kind=connection.price_kind,
        input=f"Judge for dataset {dataset.name}",
        usage=usage,
        started_at=started,
        error=error,
    )
