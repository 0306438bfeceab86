"""Pure-Python chunking and embedders. No Django."""
