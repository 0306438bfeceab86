"""Pure-Python tool runtime: Tool, ToolRegistry, built-ins, guarded egress. No Django."""
