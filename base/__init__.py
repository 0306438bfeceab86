"""The floor under every app: encryption, the versions mirror, the shared cache and Redis
wire, rate counters, logs, stream reads, plugin discovery and configuration checks.

Plain modules with no models: they import no app, no face and not `tenancy`
(import-linter's layers contract keeps it so; docs/design.md, "Layout").
"""
