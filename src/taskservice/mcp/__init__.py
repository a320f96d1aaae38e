"""MCP (the Model Context Protocol) over the task service: every agent profile is a
tool, and a call to it is an ordinary durable task.

The same layout as `taskservice.a2a`: `profile_tools` and `tasks` map profiles and
tasks to MCP's JSON shapes (tasks per revision), `handler` is the transport-independent
use of the task service, `task_methods` the task methods of both revisions, and
`server` the thin adapter onto the official SDK (`mcp` 2.x: its lowlevel server and
its stateless streamable HTTP transport), which `api/routes/mcp.py` mounts at `/mcp`.
"""
