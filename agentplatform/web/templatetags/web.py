from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from agentplatform.web.markdown import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    """`{{ message.content|markdown }}`: sanitized HTML (see agentplatform.web.markdown)."""
    return mark_safe(render_markdown(text))  # noqa: S308 (sanitized by nh3 just above)
