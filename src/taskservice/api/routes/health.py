"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from taskservice import __version__
from taskservice.api.deps import RuntimeDep
from taskservice.api.errors import problem, problem_responses
from taskservice.api.schemas import Health, Readiness
from taskservice.db import TRANSIENT_ERRORS

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", response_model=Health, summary="Alive")
async def healthz() -> Health:
    return Health(version=__version__)


@router.get(
    "/readyz",
    operation_id="readyz",
    response_model=Readiness,
    responses=problem_responses(503),
    summary="Database reachable and schema at head",
)
async def readyz(runtime: RuntimeDep) -> Readiness | JSONResponse:
    from taskservice.db import migrate  # alembic, loaded by the first probe, not at start

    try:
        revision = await migrate.current_revision(runtime.engine)  # reads the database
    except TRANSIENT_ERRORS as exc:
        return problem(503, "Not ready", f"database unreachable: {type(exc).__name__}")
    head = migrate.head_revision()
    if revision is None or revision != head:
        return problem(503, "Not ready", f"schema at {revision}, expected {head}")
    return Readiness(version=__version__, schema_revision=revision)
