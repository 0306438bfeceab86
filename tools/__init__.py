"""Tools: tenant tool definitions (Django) around the pure tool runtime (tools.runtime)."""
