"""A tenant's export: everything it holds as one documented archive (docs/operations.md,
"Offboarding").

The archive is a zip file:
- `manifest.json`: the format version, the tenant, when, and for every kind its file and
  row count (written last, so a complete archive is one that has it);
- `configuration.json`: the configuration document (`agents.config_document.config_export`,
  secrets by name only);
- `data/<app>.<model>.jsonl`: one JSON object per row of every table with a tenant key
  (`lifecycle.tables`), its columns by name (foreign keys as `<name>_id`); a secret column
  (encrypted at rest, or a stored hash) is never exported: its value is `"[secret]"` when
  set, null when not;
- `files/attachments/<storage key>`: the bytes of every attached file.

Rows are read in primary-key batches (`BATCH` at a time) and written as they come, so a big
tenant is never held in memory; files are copied through in chunks.
"""

from __future__ import annotations

import base64
import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.core.files.storage import storages
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from agents.config_document import config_export
from agents.models import Attachment
from lifecycle.tables import secret_fields, tenant_models
from tenancy.models import Tenant

FORMAT = "agent-platform-tenant-export/1"
BATCH = 1000
SECRET = "[secret]"  # noqa: S105 (the marker, not a secret)


class ArchiveEncoder(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        if isinstance(o, bytes | memoryview):
            return base64.b64encode(bytes(o)).decode()
        if hasattr(o, "tolist"):  # a pgvector embedding (numpy)
            return o.tolist()
        return super().default(o)


def row_data(obj: models.Model, secrets: set[str]) -> dict[str, Any]:
    """One row's columns by name, its secrets marked (never their value)."""
    data: dict[str, Any] = {}
    for column in obj._meta.concrete_fields:
        value = getattr(obj, column.attname)
        if column.name in secrets:
            value = SECRET if value not in (None, "") else None
        data[column.attname] = value
    return data


def batches(queryset: models.QuerySet, size: int = BATCH) -> Iterator[list[models.Model]]:
    """`queryset` in primary-key order, `size` rows a query (keyset: no OFFSET)."""
    last = None
    while True:
        page = queryset.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        rows = list(page[:size])
        if not rows:
            return
        yield rows
        last = rows[-1].pk


@dataclass
class ExportSummary:
    path: Path
    rows: dict[str, int] = field(default_factory=dict)
    files: int = 0


def tenant_export(
    *,
    tenant: Tenant,
    output: Path | IO[bytes],
    progress: Callable[[str, int], None] | None = None,
) -> ExportSummary:
    """Write `tenant`'s archive to `output` (a path, or a binary file open for writing).
    Reads every tenant table once, in batches; memory stays bounded by one batch and one
    file chunk. `progress(kind, rows written so far)` is called after every batch."""
    done = 0
    summary = ExportSummary(path=Path(getattr(output, "name", output)))
    kinds: dict[str, dict[str, Any]] = {}
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        with archive.open("configuration.json", "w", force_zip64=True) as out:
            out.write(
                json.dumps(config_export(tenant=tenant), cls=ArchiveEncoder, indent=2).encode()
            )
        for model in tenant_models():
            label = model._meta.label_lower
            name = f"data/{label}.jsonl"
            secrets = secret_fields(model)
            count = 0
            with archive.open(name, "w", force_zip64=True) as out:
                for rows in batches(model._base_manager.filter(tenant_id=tenant.pk)):
                    for obj in rows:
                        line = json.dumps(row_data(obj, secrets), cls=ArchiveEncoder)
                        out.write(line.encode() + b"\n")
                    count += len(rows)
                    done += len(rows)
                    if progress is not None:
                        progress(label, done)
            kinds[label] = {"file": name, "rows": count, "secret_columns": sorted(secrets)}
            summary.rows[label] = count
        for rows in batches(Attachment._base_manager.filter(tenant_id=tenant.pk)):
            for attachment in rows:
                summary.files += attachment_copy(archive, attachment)
            if progress is not None:
                progress("files", done)
        manifest = {
            "format": FORMAT,
            "tenant": {"id": tenant.pk, "slug": tenant.slug, "name": tenant.name},
            "exported_at": timezone.now().isoformat(),
            "configuration": "configuration.json",
            "kinds": kinds,
            "files": {"attachments": summary.files, "directory": "files/attachments/"},
            "secrets": f"never exported: secret columns read {SECRET!r} when set",
        }
        archive.writestr("manifest.json", json.dumps(manifest, indent=2))
    return summary


def attachment_copy(archive: zipfile.ZipFile, attachment: Attachment) -> int:
    try:
        source = storages["attachments"].open(attachment.storage_key, "rb")
    except FileNotFoundError:  # a row whose file went (a crash between them): nothing to copy
        return 0
    with source, archive.open(f"files/attachments/{attachment.storage_key}", "w") as out:
        shutil.copyfileobj(source, out, 1 << 20)
    return 1
