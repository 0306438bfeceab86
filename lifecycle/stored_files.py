"""The attachments' stored files as a backup and a restore see them, wherever they are kept
(agentplatform.config.attachments_storage): a directory (ATTACHMENTS_DIR) or an
S3-compatible bucket (ATTACHMENT_S3_*, under ATTACHMENT_S3_PREFIX). Each file is named by
its storage key (`t<tenant>/c<conversation>/<random>`, `t<tenant>/exports/...`), the same in
both, so a backup of one restores into the other."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from django.core.files.storage import FileSystemStorage, storages


def _storage():
    return storages["attachments"]


def directory() -> Path | None:
    """The attachments' directory, or None when they are kept in a bucket."""
    storage = _storage()
    return Path(storage.location) if isinstance(storage, FileSystemStorage) else None


def kept_in() -> str:
    return "directory" if directory() is not None else "bucket"


def _bucket_prefix() -> tuple[object, str]:
    """The bucket (boto3's, with the storage's endpoint and credentials) and the prefix its
    keys have (django-storages' `location`)."""
    storage = _storage()
    location = (storage.location or "").strip("/")
    return storage.bucket, f"{location}/" if location else ""


def stored_keys() -> Iterator[str]:
    """Every stored file's key, in order."""
    root = directory()
    if root is not None:
        if root.exists():
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                yield str(path.relative_to(root))
        return
    bucket, prefix = _bucket_prefix()
    for item in bucket.objects.filter(Prefix=prefix):  # listed in key order, a page at a time
        if not item.key.endswith("/"):
            yield item.key[len(prefix) :]


def any_stored() -> bool:
    return next(stored_keys(), None) is not None


def local_path(key: str) -> Path | None:
    """The file itself, when kept in a directory (nothing to copy)."""
    root = directory()
    return root / key if root is not None else None


def fetch(key: str, target: Path) -> None:
    """Copy the stored file `key` to `target` (a local path); FileNotFoundError when it
    went meanwhile."""
    from botocore.exceptions import ClientError

    bucket, prefix = _bucket_prefix()
    try:
        bucket.download_file(prefix + key, str(target))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
            raise FileNotFoundError(key) from None
        raise


def put(key: str, source: Path) -> None:
    """Store the local file `source` under exactly `key` (private: 0600 in a directory,
    the bucket's own policy in a bucket)."""
    root = directory()
    if root is None:
        bucket, prefix = _bucket_prefix()
        bucket.upload_file(str(source), prefix + key)
        return
    target = root / key
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.move(source, target)
    target.chmod(0o600)
