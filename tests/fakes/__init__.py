"""Test doubles that stand in for outside services (LLM providers) over real loopback HTTP."""
