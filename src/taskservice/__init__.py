"""taskservice: LLM sub-agents as durable, observable tasks.

```
client ─POST /v1/tasks─▶ api ─▶ usecases ─▶ db (one transaction: task + event + NOTIFY)
                                             │
                         Postgres ◀──────────┘
                            │  ▲ claim (SKIP LOCKED), lease, fenced writes
                            ▼  │
                 LISTEN ─▶ worker pool ─▶ executor ─▶ pydantic-ai agent
```
"""

import time

__version__ = "0.1.0"
STARTED = time.monotonic()  # when this process began to import taskservice: `serve`'s start
