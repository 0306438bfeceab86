"""An agent's fallbacks as a form field (the web form and the admin): one
`<connection>/<model>` per line, or just `<connection>` for its default model, in order.
docs/fallback.md."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms

from providers.models import MAX_FALLBACKS, fallbacks_problem


def fallback_lines(value: Any) -> str:
    """The text a stored list of fallbacks is edited as."""
    if not isinstance(value, list):
        return ""
    lines = []
    for entry in value:
        if isinstance(entry, dict):
            model = entry.get("model") or ""
            lines.append(f"{entry.get('connection', '')}/{model}" if model else entry["connection"])
    return "\n".join(lines)


def parse_fallback_line(line: str, names: Iterable[str]) -> dict[str, str]:
    """A line as {"connection", "model"}: the longest of the tenant's connection `names`
    the line starts with (a name may hold a `/`), else the text before the first `/` (the
    configuration check then says the connection is unknown)."""
    folded = line.casefold()
    matches = [n for n in names if folded == n.casefold() or folded.startswith(n.casefold() + "/")]
    if matches:
        name = max(matches, key=len)
        return {"connection": name, "model": line[len(name) + 1 :].strip()}
    name, _, model = line.partition("/")
    return {"connection": name.strip(), "model": model.strip()}


class FallbacksField(forms.CharField):
    """Set `connection_names` (the tenant's) before cleaning."""

    widget = forms.Textarea(attrs={"rows": 3})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("label", "Fallbacks")
        kwargs.setdefault(
            "help_text",
            "One connection/model per line (just the connection: its default model), tried "
            "in order when a call fails with a retryable error (rate limit, 5xx, timeout, "
            "unreachable). Those serving the agent's own model share its load when load "
            "balancing is on.",
        )
        super().__init__(**kwargs)
        self.connection_names: list[str] = []

    def prepare_value(self, value: Any) -> Any:
        return fallback_lines(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[dict[str, str]]:
        text = super().to_python(value)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if len(lines) > MAX_FALLBACKS:
            raise forms.ValidationError(f"At most {MAX_FALLBACKS} fallbacks.")
        parsed = [parse_fallback_line(line, self.connection_names) for line in lines]
        if problem := fallbacks_problem(parsed):
            raise forms.ValidationError(problem)
        return parsed
