"""The pure rules of triggers (agents/triggers.py, docs/triggers.md): cron schedules in a
time zone, webhook signatures, and the input template a webhook's payload is mapped
through. No Django: settings (minimum interval, replay window) are passed in.

The input template is tenant input treated as hostile: it is never executed by a template
engine. `{{payload.a.b.0}}` placeholders (dotted paths; a number indexes a list) are looked
up in plain JSON values and substituted in one pass, so a substituted value is never read
as a template itself; everything is bounded in size.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

MAX_CRON_CHARS = 100
MAX_TEMPLATE_CHARS = 10_000
MAX_VALUE_CHARS = 20_000  # one substituted value
MAX_PATH_PARTS = 32
ROOTS = ("payload", "trigger", "fired_at")
KINDS = ("schedule", "webhook")
SIGNATURE_HEADER = "X-Trigger-Signature"
TIMESTAMP_HEADER = "X-Trigger-Timestamp"
_SAMPLES = 24  # successive fires checked against the minimum interval
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.\-]{0,500})\s*\}\}")


class TriggerRuleError(ValueError):
    """A schedule, template or signature that is refused; the message says why."""


# -- schedules ----------------------------------------------------------------------------
def zone(name: str) -> ZoneInfo:
    """An IANA time zone by name (`Europe/Berlin`, `UTC`)."""
    if not isinstance(name, str) or not name or len(name) > 64 or name not in _zones():
        raise TriggerRuleError(f"Unknown time zone {str(name)[:64]!r}: use an IANA name.")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TriggerRuleError(f"Unknown time zone {name!r}.") from None


_ZONES: set[str] = set()


def _zones() -> set[str]:
    # As Tenant.time_zone's check (tenancy/models.py; this runtime imports no platform
    # code): not "localtime", the server's own zone, whatever it is.
    if not _ZONES:
        _ZONES.update(available_timezones() - {"localtime"})
        _ZONES.add("UTC")
    return _ZONES


def next_fire(expression: str, timezone: str, after: datetime) -> datetime:
    """The first fire time strictly after `after` (an aware datetime), in UTC. The cron
    expression is read in `timezone`: a time skipped by a DST change fires once at the first
    minute that exists, a time repeated fires once (cronsim's rules)."""
    fires = _iterate(expression, timezone, after)
    try:
        return next(fires).astimezone(UTC)
    except StopIteration:
        raise TriggerRuleError("This schedule never fires.") from None


def check_schedule(
    expression: str, timezone: str, *, min_interval_s: int, now: datetime
) -> datetime:
    """Refuse an expression that does not parse, never fires, or fires more often than once
    per `min_interval_s` (over its next few fires). Returns its next fire after `now`."""
    if not isinstance(expression, str) or not expression.strip():
        raise TriggerRuleError("A schedule needs a cron expression, e.g. `0 9 * * 1-5`.")
    if len(expression) > MAX_CRON_CHARS:
        raise TriggerRuleError(f"At most {MAX_CRON_CHARS} characters.")
    fires = _iterate(expression, timezone, now)
    times: list[datetime] = []
    try:
        for _ in range(_SAMPLES):
            times.append(next(fires).astimezone(UTC))
    except StopIteration:
        pass
    except (CronSimError, ValueError, OverflowError) as exc:
        raise _not_cron(exc) from None
    if not times:
        raise TriggerRuleError("This schedule never fires.")
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    if gaps and min(gaps) < timedelta(seconds=min_interval_s):
        raise TriggerRuleError(
            f"This schedule fires more often than once every {min_interval_s} seconds "
            "(the platform's minimum interval)."
        )
    return times[0]


def _iterate(expression: str, timezone: str, after: datetime):
    tz = zone(timezone)
    try:
        return iter(CronSim(expression.strip(), after.astimezone(tz)))
    except (CronSimError, ValueError, OverflowError) as exc:
        raise _not_cron(exc) from None


_CRON_FIELDS = {  # cronsim's "Bad <field>" -> the field, in our words
    "minute": "minute (0-59)",
    "hour": "hour (0-23)",
    "day-of-month": "day of the month (1-31)",
    "month": "month (1-12 or JAN-DEC)",
    "day-of-week": "day of the week (0-7 or SUN-SAT)",
}
_CRON_SHAPE = (
    "five fields, minute hour day-of-month month day-of-week, each `*`, a number, a list "
    "`1,15`, a range `1-5` or a step `*/15`; e.g. `0 9 * * 1-5`"
)


def _not_cron(exc: Exception) -> TriggerRuleError:
    """Our words for why cronsim refused an expression (its own text never reaches a
    caller): the field it names, else the shape of one."""
    field = _CRON_FIELDS.get(str(exc).removeprefix("Bad "))
    if field is not None:
        return TriggerRuleError(f"Not a cron expression: its {field} field is not valid.")
    return TriggerRuleError(f"Not a cron expression: {_CRON_SHAPE}.")


def trigger_problems(
    *, name: Any, kind: Any, cron: Any, timezone: Any, input_template: Any,
    min_interval_s: int, now: datetime,
) -> dict[str, str]:  # fmt: skip
    """The rules of one trigger's own values, by field (name, kind, cron, timezone,
    input_template): what `agents.triggers.trigger_check` and the configuration compiler
    both ask. Its target and member are checked where the tenant's objects are known."""
    problems: dict[str, str] = {}
    if not isinstance(name, str) or not name.strip() or "\x00" in name or len(name) > 100:
        problems["name"] = "A name of 1 to 100 characters."
    if kind not in KINDS:
        problems["kind"] = "schedule or webhook."
    try:
        check_template(input_template or "", payload_allowed=kind == "webhook")
    except TriggerRuleError as exc:
        problems["input_template"] = str(exc)
    if kind == "schedule":
        try:
            check_schedule(cron, timezone, min_interval_s=min_interval_s, now=now)
        except TriggerRuleError as exc:
            problems["timezone" if "time zone" in str(exc) else "cron"] = str(exc)
    else:
        if cron:
            problems["cron"] = "Only a schedule has a cron expression."
        if timezone:  # (unused by a webhook, but never stored unchecked)
            try:
                zone(timezone)
            except TriggerRuleError as exc:
                problems["timezone"] = str(exc)
    return problems


# -- webhook signatures ---------------------------------------------------------------------
def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 with the trigger's secret over `<timestamp>.<raw body>`."""
    message = timestamp.encode("ascii") + b"." + body
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_refusal(
    *, secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float,
    tolerance_s: int,
) -> str | None:  # fmt: skip
    """Why a delivery's signature is refused, or None when it is good. The timestamp must be
    within `tolerance_s` of `now` (a replay of an old delivery is refused); the signature is
    compared in constant time."""
    if not timestamp or not signature:
        return f"Sign the body: {TIMESTAMP_HEADER} and {SIGNATURE_HEADER} headers are required."
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return f"{TIMESTAMP_HEADER} must be Unix seconds."
    if abs(now - int(timestamp)) > tolerance_s:
        return f"{TIMESTAMP_HEADER} is outside the {tolerance_s}-second window (stale or replayed)."
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("utf-8")):
        return "The signature does not match."
    return None


# -- the input template ---------------------------------------------------------------------
def check_template(template: str, *, payload_allowed: bool) -> None:
    """Refuse a template that is too long or names something the context never has."""
    if not isinstance(template, str) or not template.strip():
        raise TriggerRuleError("Give the run's input (a message, or a template).")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TriggerRuleError(f"At most {MAX_TEMPLATE_CHARS} characters.")
    if "\x00" in template:
        raise TriggerRuleError("Text may not contain NUL characters.")
    for match in PLACEHOLDER.finditer(template):
        parts = match.group(1).split(".")
        if parts[0] not in ROOTS:
            raise TriggerRuleError(
                f"Unknown placeholder {{{{{match.group(1)[:60]}}}}}: use payload.…, "
                "trigger.name or fired_at."
            )
        if parts[0] == "payload" and not payload_allowed:
            raise TriggerRuleError("A schedule has no payload: use trigger.name or fired_at.")
        if len(parts) > MAX_PATH_PARTS:
            raise TriggerRuleError(f"A path of at most {MAX_PATH_PARTS} parts.")


def render_input(template: str, context: dict[str, Any], *, max_chars: int) -> str:
    """The template with each placeholder replaced by the value at its path in `context`
    (text as it is, other JSON compact; a missing path: empty). One pass: a value is never
    expanded again. TriggerRuleError as soon as the result is longer than `max_chars`:
    each path's value is made once, and a template repeating a large one stops early."""
    values: dict[str, str] = {}

    def value_of(path: str) -> str:
        found: Any = context
        for part in path.split(".")[:MAX_PATH_PARTS]:
            if isinstance(found, dict) and part in found:
                found = found[part]
            elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
                found = found[int(part)]
            else:
                return ""
        text = found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)
        return text[:MAX_VALUE_CHARS]

    template = template[:MAX_TEMPLATE_CHARS]
    parts: list[str] = []
    length = position = 0
    for match in PLACEHOLDER.finditer(template):
        path = match.group(1)
        if path not in values:
            values[path] = value_of(path)
        for piece in (template[position : match.start()], values[path]):
            parts.append(piece)
            length += len(piece)
        position = match.end()
        if length > max_chars:
            break
    parts.append(template[position:])
    rendered = "".join(parts)
    if len(rendered) > max_chars:
        raise TriggerRuleError(f"The mapped input is longer than {max_chars} characters.")
    if not rendered.strip():
        raise TriggerRuleError("The mapped input is empty.")
    return rendered
