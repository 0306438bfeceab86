"""Pure-Python agent loop, crews, workflows, structured output, memory tools. No Django."""
