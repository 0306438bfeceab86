"""Fixtures shared with other folders live in tests/conftest.py (connection, agent)."""
