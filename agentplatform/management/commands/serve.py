"""`manage.py serve`: the whole platform on one machine (what `make run` calls).

Embedded PostgreSQL and Redis are already up (settings started them when no URL is
set, and this process holds their handles); this migrates, seeds the demo tenant, then
becomes agentplatform.preload, which forks uvicorn and the Celery workers as its children
(with the URLs in their environment) and then becomes agentplatform.supervisor. Ctrl-C or
SIGTERM stops the children, then the embedded services, with nothing left.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agentplatform import embedded, preload, supervisor
from agents.seed import seed_demo_agent
from providers.services import seed_demo_connection
from tenancy import services
from tenancy.models import Membership, Role, Tenant


class Command(BaseCommand):
    help = "Run the platform: migrate, seed the demo tenant, start the web server and a worker."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-worker", action="store_true", help="Run no Celery worker")

    def handle(self, *args, host: str, port: int, no_worker: bool, **options) -> None:
        started = time.monotonic()

        def request_stop(signum, frame) -> None:  # unwind now; atexit stops the embedded services
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        call_command("migrate", interactive=False, verbosity=0)
        login = self._seed_demo()
        url = f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0') else host}:{port}/"  # noqa: S104
        banner = [
            self.style.SUCCESS(f"Agent Platform is up at {url}"),
            login,
            "Health: " + url + "healthz   Admin: " + url + "admin/   Ctrl-C stops.",
        ]
        self._become_supervisor(host, port, banner, started, with_worker=not no_worker)

    def _seed_demo(self) -> str:
        username = os.environ.get("DEMO_USERNAME", "demo")
        password = os.environ.get("DEMO_PASSWORD") or None
        with transaction.atomic():
            created = services.user_get_or_create(username=username, password=password)
            if password and not created.password and not created.user.check_password(password):
                created.user.set_password(password)
                created.user.save(update_fields=["password"])
            tenant = Tenant.objects.filter(slug="demo").first() or services.tenant_create(
                slug="demo", name="Demo"
            )
            if not Membership.objects.filter(tenant=tenant, user=created.user).exists():
                services.membership_set(tenant=tenant, user=created.user, role=Role.OWNER)
            seed_demo_connection(tenant)
            seed_demo_agent(tenant)
        if password:
            return f"Log in as {username!r} with the DEMO_PASSWORD from the environment."
        if created.password:  # generated just now
            return f"Log in as {username!r} with password {created.password!r} (shown once)."
        return (
            f"Log in as {username!r} (password printed at first start; "
            f"`python manage.py changepassword {username}` sets a new one)."
        )

    def _become_supervisor(
        self, host: str, port: int, banner: list[str], started: float, *, with_worker: bool
    ) -> None:
        """Replace this process with agentplatform.preload, which forks the web server and
        the workers from one loaded platform and then becomes agentplatform.supervisor (the
        same pid throughout: its handles on the embedded servers stay registered, and the
        children are its own). Only what is inherited on purpose crosses: the output
        streams, the children's environment, the plan on a pipe, and a stop signal that came
        meanwhile (blocked here, pending until the next image takes it)."""
        from django.db import connections

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        held = [
            name
            for name, on in (
                ("postgres", settings.EMBEDDED_DATABASE),
                ("redis", settings.EMBEDDED_REDIS),
            )
            if on
        ]
        connections.close_all()
        for connection in connections.all():
            if getattr(connection, "pool", None) is not None:
                connection.close_pool()
        env = child_env()
        env["PORT"] = str(port)
        given = preload.plan(
            platform_commands(host, port, with_worker=with_worker),
            cwd=settings.BASE_DIR,
            listen=(host, port),
            banner=banner,
            started=started,
            embedded_data_dir=settings.DATA_DIR if held else None,
            embedded=held,
        )
        fd = supervisor.pipe_with(given)
        sys.stdout.flush()
        sys.stderr.flush()
        argv = [sys.executable, "-m", "agentplatform.preload", str(fd)]
        try:
            os.execve(sys.executable, argv, env)  # noqa: S606 (our own interpreter and module)
        except OSError as exc:
            os.close(fd)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
            raise CommandError(f"could not start the platform's processes: {exc}") from None


def child_env() -> dict[str, str]:
    """What the web server and worker children get: this process's environment plus the
    URLs and keys of the services it started (the children take no handle on them). The
    benchmarks start their children with it too."""
    env = dict(os.environ)
    env["DATABASE_URL"] = (
        embedded.postgres_url(settings.DATABASES["default"])
        if (settings.EMBEDDED_DATABASE)
        else env["DATABASE_URL"]
    )
    env["REDIS_URL"] = settings.REDIS_URL
    env["SECRET_KEY"] = settings.SECRET_KEY
    env["FIELD_ENCRYPTION_KEYS"] = ",".join(settings.FIELD_ENCRYPTION_KEYS)
    env["DATA_DIR"] = str(settings.DATA_DIR)
    env.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    # uvicorn's access log formats and writes a line per request on the event loop, in the
    # middle of sending the answer: 0.2 ms of CPU and 0.3-0.5 ms of each /v1 call's latency
    # (bench/gateway.py). Every run and gateway call is recorded anyway; UVICORN_ACCESS_LOG=true
    # turns the lines back on.
    env.setdefault("UVICORN_ACCESS_LOG", "false")
    return env


def platform_commands(host: str, port: int, *, with_worker: bool = True) -> dict[str, list[str]]:
    """The processes of one machine (the benchmarks start exactly these): the web server; a
    worker for runs and housekeeping whose processes each hold up to RUN_CONCURRENCY runs
    (WORKER_CONCURRENCY processes), with beat inside it; a worker for batch work (ingestion),
    so a long ingestion never holds up a chat."""
    celery = [sys.executable, "-m", "celery", "-A", "agentplatform", "worker"]
    quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO"]
    commands = {
        "web server": [
            sys.executable, "-m", "uvicorn", "agentplatform.asgi:application",
            "--host", host, "--port", str(port),
            "--timeout-graceful-shutdown", "5", "--lifespan", "on",
        ],
    }  # fmt: skip
    if with_worker:
        # One process per runs worker (solo pool): its task only admits a run to the
        # process's event loop (agents.runs.worker), so a prefork parent handing each
        # message to a child over a pipe only added CPU (bench/api.py).
        for index in range(int(os.environ.get("WORKER_CONCURRENCY", "2"))):
            name = "worker" if index == 0 else f"worker {index + 1}"
            commands[name] = [
                *celery, *quiet, "-n", f"runs{index + 1}@%h",
                "-Q", f"{settings.RUNS_QUEUE},{settings.HOUSEKEEPING_QUEUE}",
                "--pool", "solo",
                # Taking one message at a time made admission, not the model, the
                # bottleneck (bench/concurrency.py).
                "--prefetch-multiplier", os.environ.get("RUN_PREFETCH", "64"),
            ]  # fmt: skip
        # Beat inside the first, as a thread (agentplatform.celery.BeatThread): the sweeper
        # that resumes runs of dead workers.
        commands["worker"] += [
            "--beat-thread",
            "--schedule",
            str(settings.DATA_DIR / "celerybeat-schedule"),
        ]
        # One batch job at a time by default, in the worker process itself: a prefork pool
        # of one child cost a second copy of the platform's memory (71 MB PSS idle,
        # bench/footprint.py) for nothing but that job; more than one take a pool.
        batch = int(os.environ.get("BATCH_WORKER_CONCURRENCY", "1"))
        pool = ["--pool", "solo"] if batch <= 1 else ["--concurrency", str(batch)]
        commands["batch worker"] = [
            *celery, *quiet, "-n", "batch@%h", "-Q", settings.BATCH_QUEUE, *pool,
        ]  # fmt: skip
    return commands
