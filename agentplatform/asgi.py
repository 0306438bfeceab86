"""ASGI entry point: Django, with the MCP server at /mcp beside it (agentplatform.mcp.asgi).

Run it with lifespan on: the start-up checks run there (agentplatform.startup_checks), and
the MCP app starts its session manager there (Django never sees the lifespan scope).
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402

# Under ASGI each request's sync code runs in a thread of its own; a connection kept for
# reuse would stay with a thread that is gone. Connect per request instead (a pooled
# connection when the pool is on, the default, where it is 0 already) unless
# DB_CONN_MAX_AGE says otherwise. Set here rather than as the environment's default: the
# settings may have been read before this module (serve's children, forked from
# agentplatform.preload), and no connection was made yet.
if "DB_CONN_MAX_AGE" not in os.environ:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0

from tenancy import rls  # noqa: E402 (after setup)

rls.assume_app_role()  # a web process logs in as the app role: the tenant policies bind it

from agentplatform.asgi_handler import StreamingASGIHandler, with_api  # noqa: E402
from agentplatform.collector import freeze_what_was_loaded  # noqa: E402
from agentplatform.mcp.asgi import with_mcp  # noqa: E402
from agentplatform.startup_checks import checked_at_startup  # noqa: E402
from agentplatform.trace_context import with_caller_trace  # noqa: E402
from agentplatform.v1.gateway import flush_gateway_calls, with_gateway_door  # noqa: E402
from agents.runs import handing_over_at_shutdown  # noqa: E402

application = checked_at_startup(
    handing_over_at_shutdown(
        with_caller_trace(
            with_mcp(
                with_api(
                    StreamingASGIHandler(),
                    with_gateway_door(
                        StreamingASGIHandler(
                            settings.API_MIDDLEWARE, views_release_connections=True
                        )
                    ),
                )
            )
        ),
        flush_gateway_calls,
    )
)

freeze_what_was_loaded()
