"""A `judge` case's verdict: the dataset's judge connection (only ever one of the tenant's
own) and model, asked through agents.runtime.judge. Each call is held against the quotas of
the case's run (its tenant, member, key and agent: agents.quotas) and recorded as a finished
run of that model (`gateway_model` `<connection>/<model>`, of the same member and key), so the
usage page counts the judge's tokens with everything else; the evaluation's result keeps
them too. A refused call is not recorded: the model was never asked."""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.utils import timezone

from agents import quotas
from agents.models import Dataset, Run
from agents.runtime.judge import JudgeAnswerError, judge
from agents.services import record_model_call
from providers.models import ProviderConnection
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
    error, usage = "", Usage()
    meter = quotas.Meter.for_run(run) if run is not None else quotas.Meter(dataset.tenant_id)
    adapter = quotas.metered(adapter_for(connection), meter, price_kind=connection.price_kind)
    try:
        verdict = async_to_sync(judge)(
            adapter, model=model, rubric=rubric, input=input, answer=answer
        )
        outcome = JudgeOutcome(verdict.passed, verdict.reason, verdict.usage)
        usage = verdict.usage
    except quotas.QuotaExceeded as exc:  # (before ProviderError: it is one)
        return JudgeOutcome(None, str(exc), Usage(), refused=True)
    except JudgeAnswerError as exc:
        error, usage = str(exc), exc.usage
        outcome = JudgeOutcome(None, error, usage)
    except ProviderError as exc:
        error = f"the judge could not be asked: {provider_failure(exc, connection.name, model)}"
        outcome = JudgeOutcome(None, error, usage)
    _record_call(dataset, connection, model, usage, error, started, run)
    return outcome


def _record_call(dataset, connection, model, usage, error, started, run: Run | None) -> None:
    """Its cost as its hold settled it (the same price kind, model and counts)."""
    record_model_call(
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
