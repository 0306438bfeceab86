"""What changed and who did it: the audit log, configuration history, and `saving`, the one
path every configuration write takes to record both in its own transaction.

Its models (AuditEntry, ConfigVersion) stay in tenancy/models.py with the app's others.
"""
