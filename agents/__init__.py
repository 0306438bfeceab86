"""Agents: agents, crews, conversations and durable runs around the agent runtime."""
