"""A migrated test database to copy: migrating one takes about 5 s of CPU here, copying one
with `CREATE DATABASE ... TEMPLATE` under a second, and every session (each pytest-xdist
worker is one) needs its own database.

The template's name carries a hash of everything that decides what migrate makes (every
app's migrations and models, and the post_migrate code that grants the app login its
rights), so a change to any of them makes a new template on the next run; older templates
are dropped then. Sessions starting side by side take turns under an advisory lock: the
first migrates its database as Django always does and copies it into the template, the
others copy the template.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from django.apps import apps
from django.db import DatabaseError, connections

PREFIX = "tmpl_agentplatform_"
_LOCK = 72_034_117  # pg_advisory_lock key: one template made at a time on a server
# Run by post_migrate (tenancy/apps.py): what it grants is in the template.
_POST_MIGRATE_CODE = ["tenancy/app_login.py", "tenancy/apps.py"]
ROOT = Path(__file__).resolve().parent.parent


def template_name() -> str:
    digest = hashlib.sha256(sys.version.encode())
    files: list[Path] = [ROOT / path for path in _POST_MIGRATE_CODE]
    for app in apps.get_app_configs():
        here = Path(app.path)
        files += sorted(here.glob("migrations/*.py")) + sorted(here.glob("models*.py"))
        files += sorted(here.glob("models/*.py"))
    for path in files:
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return PREFIX + digest.hexdigest()[:16]


@contextmanager
def copied_or_saved(alias: str = "default") -> Iterator[bool]:
    """Around Django's test database setup (with keepdb, so it keeps a copy it finds):
    makes that database as a copy of the template when there is one, and yields True;
    else yields False and, once the setup has migrated it, saves it as the template."""
    connection = connections[alias]
    creation = connection.creation
    quote = connection.ops.quote_name
    database, template = creation._get_test_db_name(), template_name()
    with connection._nodb_cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [_LOCK])
        try:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
            found = cursor.fetchone() is not None
            if found:
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(database)}")
                cursor.execute(f"CREATE DATABASE {quote(database)} TEMPLATE {quote(template)}")
            yield found
            if not found:
                connection.close()  # a template must have no session open on it
                if connection.pool is not None:
                    connection.close_pool()
                cursor.execute(f"CREATE DATABASE {quote(template)} TEMPLATE {quote(database)}")
                cursor.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    [PREFIX + "%", template],
                )
                for (stale,) in cursor.fetchall():
                    with suppress(DatabaseError):  # a session of older code copying it
                        cursor.execute(f"DROP DATABASE IF EXISTS {quote(stale)}")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_LOCK])


def make_ahead(unblocked: Callable[[], AbstractContextManager]) -> threading.Thread:
    """Under pytest-xdist: the controller, idle while its workers start and collect (10 to
    25 s), makes the template meanwhile in a thread of its own; the first worker to need a
    database then copies it, rather than migrate while the other workers wait on the lock
    doing nothing. `unblocked`: pytest-django's database access, allowed. Failing here only
    warns: a worker then makes the template as it would have."""
    thread = threading.Thread(target=_make, args=(unblocked,), name="template", daemon=True)
    thread.start()
    return thread


def _make(unblocked: Callable[[], AbstractContextManager], alias: str = "default") -> None:
    from django.test.utils import setup_databases, teardown_databases

    connection = connections[alias]
    try:
        with unblocked():
            with connection._nodb_cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template_name()])
                if cursor.fetchone() is not None:
                    return
            database = connection.creation._get_test_db_name()
            with copied_or_saved(alias) as found:  # (found: made meanwhile, and copied)
                if not found:
                    made = setup_databases(
                        verbosity=0,
                        interactive=False,
                        keepdb=True,
                        aliases={alias},
                        serialized_aliases=set(),
                    )
            if found:
                with connection._nodb_cursor() as cursor:
                    cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(database)}")
            else:
                teardown_databases(made, verbosity=0)  # the template keeps its copy
    except Exception as exc:  # a worker makes it then
        warnings.warn(f"the test database template was not made ahead: {exc!r}", stacklevel=1)
    finally:
        connections.close_all()
