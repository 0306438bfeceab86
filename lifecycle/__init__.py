"""The data's life: backups that restore, retention, a tenant's and a person's export and
erasure (docs/operations.md). It stands above every app, because it must know each app's
tables; nothing below it imports it.

- backup.py            `manage.py backup`: database dump, files, manifest (key if asked)
- backup_keys.py       the encryption keys a backup needs (fingerprints, never keys) and
                       restore's check of the keys it will start with
- restore_preflight.py that check before the settings start the embedded PostgreSQL
- restore.py           `manage.py restore`: into an empty installation, with its checks
- tables.py            which tables hold a tenant's rows; which columns are secrets
- export.py            a tenant's archive (`manage.py tenant export`)
- tenant_exports.py    an owner's archive of it: asked for, followed, downloaded (the page,
                       REST)
- export_builds.py     its build by a worker (tasks.py: `lifecycle.build_tenant_export`) and
                       the hourly expiry of built ones
- erasure.py           a tenant's erasure, resumable (`manage.py tenant delete`)
- erasure_requests.py  an owner's request for it, which an operator confirms
- person.py            a person's own export; an admin's erasure of a person
- retention.py         how long a tenant's data is kept (RetentionPolicy, LegalHold) and the
                       periodic purge in batches (tasks.py: `lifecycle.purge_retention`)
- retention_settings.py  what an admin sets of it (the page, REST, the document), holds
"""
