from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils.safestring import SafeString, mark_safe

from agentplatform.web.markdown import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    """`{{ message.content|markdown }}`: sanitized HTML (see agentplatform.web.markdown)."""
    return mark_safe(render_markdown(text))  # noqa: S308 (sanitized by nh3 just above)


@register.filter(name="usd")
def usd_filter(value) -> str:
    """`{{ run.cost_usd|usd }}`: US dollars, to the cent from a dollar, else to the
    millionth without trailing zeros ($0.0035): small runs cost fractions of a cent."""
    if value is None or value == "":
        return "—"
    amount = Decimal(value)
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    text = f"{amount:.6f}".rstrip("0").rstrip(".")
    return f"${text if text not in ('0', '-0') else '0'}"
