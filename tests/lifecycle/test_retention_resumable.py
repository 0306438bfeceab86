"""A purge killed with SIGKILL half-way (in a batch's transaction, its stored files already
deleted), then run again, reaches the same end state as one never interrupted: the same rows
left, the same counts recorded, the files gone. A real child process logged in as the app
role, as a worker is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.files.storage import storages

from agents.models import Attachment
from lifecycle.retention import tenant_purge
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_tenant
from tests.lifecycle.retention_rows import counts, make_rows, policy, recorded

# Purges one tenant one row per batch; inside each batch's transaction, before its commit, it
# says so and waits for a line on stdin: the test kills it there.
PURGE = """
import sys
import django
django.setup()
from tenancy import rls
rls.assume_app_role()
from lifecycle import retention

record = retention._TenantPurge._record
def record_and_wait(self, batch_counts):
    record(self, batch_counts)
    print("batch", flush=True)
    sys.stdin.readline()
retention._TenantPurge._record = record_and_wait
retention.tenant_purge(tenant_id=int(sys.argv[1]), batch=1)
print("done", flush=True)
"""


def purge_killed_in_batch(tenant_id: int, nth: int) -> None:
    child = processes.spawn(
        [sys.executable, "-c", PURGE, str(tenant_id)],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for n in range(1, nth + 1):
            assert child.stdout.readline().strip() == "batch", "the purge ended early"
            if n < nth:
                child.stdin.write("\n")
                child.stdin.flush()
        os.kill(child.pid, signal.SIGKILL)  # inside the nth batch's transaction
    finally:
        child.kill()
        child.wait(30)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_purge_killed_half_way_then_run_again_ends_as_one_never_interrupted():
    killed, never = make_tenant("killed"), make_tenant("never")  # alike, row for row
    interrupted, whole = make_rows(killed), make_rows(never)
    policy(killed, 30)
    policy(never, 30)
    tenant_purge(tenant_id=never.pk, batch=1)  # the end state to reach

    # Killed in its second batch: the second file of a conversation deleted, its row not yet.
    purge_killed_in_batch(killed.pk, 2)
    first, second = interrupted.old_attachment_keys
    assert not storages["attachments"].exists(first) and not storages["attachments"].exists(second)
    assert not Attachment.objects.filter(storage_key=first).exists()
    assert Attachment.objects.filter(storage_key=second).exists()  # its deletion rolled back
    assert counts(killed) != counts(never)  # half-way
    assert sum(recorded(killed).values()) == 1  # the killed batch recorded nothing
    # Run again, killed again among the runs' events, then run to its end.
    purge_killed_in_batch(killed.pk, 8)
    tenant_purge(tenant_id=killed.pk, batch=1)

    assert counts(killed) == counts(never)
    assert recorded(killed) == recorded(never)
    stored = storages["attachments"]
    assert not any(stored.exists(key) for key in interrupted.old_attachment_keys)
    assert not any(stored.exists(key) for key in whole.old_attachment_keys)
