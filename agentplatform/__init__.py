"""The Django project (named so as not to shadow the stdlib `platform`): settings, URLs, the
faces (REST, /v1, MCP, web) and what the processes share. The apps stand below it, and
`tenancy` and `base` below them (docs/design.md, "Layout").

The Celery app is loaded by Django's start (PlatformConfig.ready), not by this package:
`python -m agentplatform.supervisor` imports the package without Django, and the Celery app
cost it 17 MB of its 24 (PSS, bench/footprint.py). `celery -A agentplatform` finds
agentplatform.celery by itself.
"""
