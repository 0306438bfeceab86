"""`manage.py serve`: the whole platform on one machine (what `make run` calls).

Embedded PostgreSQL and Redis are already up (settings started them when no URL is set, and
this process holds their handles); a child forked from this process runs the system checks,
migrates and seeds the demo tenant; then this process loads what the web server and the
Celery workers load, forks them as its children (with the URLs in their environment:
agentplatform.preload) and becomes agentplatform.supervisor. Ctrl-C or SIGTERM stops the
children, then the embedded services, with nothing left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, SystemCheckError
from django.db import connections, transaction

from agentplatform import embedded, preload, supervisor
from agents.seed import seed_demo_agent
from providers.services import seed_demo_connection
from tenancy import services
from tenancy.models import Membership, Role, Tenant


class Command(BaseCommand):
    help = "Run the platform: migrate, seed the demo tenant, start the web server and a worker."
    # The system checks run in the child that migrates (`_prepared`): they load the URLconf,
    # which the workers forked from this process must not hold.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-worker", action="store_true", help="Run no Celery worker")
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")

    def handle(
        self, *args, host: str, port: int, no_worker: bool, skip_checks: bool, **options
    ) -> None:
        started = time.monotonic()

        def request_stop(signum, frame) -> None:  # unwind now; atexit stops the embedded services
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        login = self._prepared(checks=not skip_checks)
        url = f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0') else host}:{port}/"  # noqa: S104
        banner = [
            self.style.SUCCESS(f"Agent Platform is up at {url}"),
            login,
            "Health: " + url + "healthz   Admin: " + url + "admin/   Ctrl-C stops.",
        ]
        sys.exit(self._start_platform(host, port, banner, started, with_worker=not no_worker))

    def _prepared(self, *, checks: bool) -> str:
        """The system checks, `migrate` and the demo tenant, in a child forked from this
        process: only it loads the URLconf (for the checks) and the migration graph, which
        the platform's processes, forked from this one next, then never hold; and this
        process need not start afresh to shed them. Returns the line saying how to log in;
        exits with the child's status if it failed (it printed why). A stop signal
        meanwhile stops the child, then this process."""
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            code = 1
            try:
                code = self._prepare(write, checks=checks)
            finally:  # even if a second stop signal lands in _prepare's own handlers
                # (_exit: no exit hooks, which would release this process's embedded servers)
                os._exit(code)
        os.close(write)
        try:
            with os.fdopen(read, "rb") as pipe:
                login = pipe.read().decode()
            status = os.waitpid(pid, 0)[1]
        except BaseException:  # SystemExit from request_stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            raise
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            sys.exit(code if code > 0 else 128 - code)
        return login

    def _prepare(self, login_pipe: int, *, checks: bool) -> int:
        """In the child: what `_prepared` runs, the login line written to `login_pipe`; its
        exit status. A failure is printed as manage.py prints a command's."""
        try:
            if checks:
                self.check()
            call_command("migrate", interactive=False, verbosity=0)
            os.write(login_pipe, self._seed_demo().encode())
            return 0
        except SystemCheckError as error:  # the checks' own report
            self.stderr.write(str(error), lambda text: text)
            return error.returncode
        except CommandError as error:
            self.stderr.write(f"CommandError: {error}")
            return error.returncode
        except SystemExit as stop:  # request_stop
            return stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
            return 1
        finally:
            connections.close_all()
            sys.stdout.flush()
            sys.stderr.flush()

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

    def _start_platform(
        self, host: str, port: int, banner: list[str], started: float, *, with_worker: bool
    ) -> int:
        """Fork the web server and the workers from this process once it has loaded what
        they load (agentplatform.preload), then become agentplatform.supervisor (the same
        pid throughout: its handles on the embedded servers stay registered, and the
        children are its own). A stop signal from here on is noted, not raised: the
        supervisor stops whatever has started. Returns only if the supervisor's image could
        not start (its exit status)."""
        stopping: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, frame: stopping.append(signum))
        held = [
            name
            for name, on in (
                ("postgres", settings.EMBEDDED_DATABASE),
                ("redis", settings.EMBEDDED_REDIS),
            )
            if on
        ]
        env = {**child_env(), "PORT": str(port)}  # what the children inherit: the changes
        os.environ.update(
            {name: value for name, value in env.items() if os.environ.get(name) != value}
        )
        os.chdir(settings.BASE_DIR)
        connections.close_all()  # no connection of this process may be shared by its forks
        watch = supervisor.plan(
            {},
            listen=(host, port),
            banner=banner,
            started=started,
            embedded_data_dir=settings.DATA_DIR if held else None,
            embedded=held,
        )
        return preload.run(platform_commands(host, port, with_worker=with_worker), watch, stopping)


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
