"""taskservice: LLM sub-agents as durable, observable tasks.

```
client ─POST /v1/tasks─▶ api ─▶ service ─▶ store (one transaction: task + event + NOTIFY)
                                                │
                         Postgres ◀─────────────┘
                            │  ▲ claim (SKIP LOCKED), lease, fenced writes
                            ▼  │
                 LISTEN ─▶ worker pool ─▶ executor ─▶ pydantic-ai agent
```
"""

__version__ = "0.1.0"
