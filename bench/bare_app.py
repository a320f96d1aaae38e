"""Baselines for bench/submit.py: the least a FastAPI + asyncpg service can do to
accept a task — validate a JSON body, write, answer 201.

- `/v1/tasks`: one equivalent row into the same `tasks` table; no event, no NOTIFY.
- `/v1/tasks-same-sql`: taskservice's own submit statement (task row + its event,
  whose trigger NOTIFYs), one request per transaction. taskservice runs the same
  statement for batches of concurrent submits that share a commit (`db.submits`)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from pydantic import BaseModel

from taskservice.db.submits import create_many
from taskservice.db.tasks import task_params
from taskservice.domain.models import AgentSpec, NewTask

DSN = os.environ["BENCH_DSN"]
INSERT = """
INSERT INTO tasks (id, tenant, state, input, agent, metadata, max_attempts)
VALUES ($1, 'bare', 'pending', $2::jsonb, $3::jsonb, $4::jsonb, 3)
RETURNING id, state, input, metadata, created_at
"""
AGENT = json.dumps({"profile": "default", "model": "offline", "system_prompt": "x"})


class TaskIn(BaseModel):
    input: str
    metadata: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.pool = await asyncpg.create_pool(DSN, min_size=10, max_size=20)
    yield
    await app.state.pool.close()


app = FastAPI(lifespan=lifespan)


@app.post("/v1/tasks", status_code=201)
async def create(body: TaskIn, request: Request) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        row = await conn.fetchrow(
            INSERT, uuid.uuid4(), json.dumps(body.input), AGENT, json.dumps(body.metadata)
        )
    return {
        "id": str(row["id"]),
        "state": row["state"],
        "input": json.loads(row["input"]),
        "metadata": json.loads(row["metadata"]),
        "created_at": row["created_at"].isoformat(),
    }


@app.post("/v1/tasks-same-sql", status_code=201)
async def create_same_sql(body: TaskIn, request: Request) -> dict[str, Any]:
    new = NewTask(
        tenant="bare",
        input=body.input,  # create_many encodes the JSON columns
        agent=AgentSpec.from_json(json.loads(AGENT)),
        metadata=body.metadata,
        max_attempts=3,
    )
    params = task_params(new)
    async with request.app.state.pool.acquire() as conn:
        (row,) = await create_many(conn, [params])
    return {
        "id": str(row["id"]),
        "state": "pending",
        "input": body.input,
        "metadata": body.metadata,
        "created_at": row["created_at"].isoformat(),
    }
