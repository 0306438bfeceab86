"""Pure-Python model adapters (Anthropic, OpenAI and compatible, FakeModel). No Django."""
