"""The data's life: backups that restore, retention, a tenant's and a person's export and
erasure (docs/operations.md). It stands above every app, because it must know each app's
tables; nothing below it imports it.

- backup.py: `manage.py backup`, the archive (database dump, files, manifest, key if asked)
- restore.py: `manage.py restore`, into an empty installation, with its checks
"""
