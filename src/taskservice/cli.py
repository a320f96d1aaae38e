"""The `taskservice` command: serve, worker, migrate, keys, openapi."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from taskservice.settings import Settings, get_settings

log = logging.getLogger("taskservice")


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # alembic announces every plugin it loads at INFO; only its migration lines matter.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "no_workers", False):
        overrides["workers_enabled"] = False
    return get_settings(**overrides)


STARTUP_FAILED = 3  # exit status when the app could not start (as uvicorn's)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from taskservice.api.app import create_app

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # SIGTERM/SIGINT ask for a graceful stop, after which the process exits 0.
            # (uvicorn would re-raise the signal afterwards and die by it.)
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    settings = _settings(args)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=args.log_level.lower(),
        access_log=args.access_log,
        timeout_graceful_shutdown=int(settings.lease_seconds),
    )
    server = Server(config)
    server.run()
    return 0 if server.started else STARTUP_FAILED


def cmd_worker(args: argparse.Namespace) -> int:
    from taskservice.runtime import Runtime

    settings = _settings(args)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Runtime.open(settings, api=False, workers=True):
            log.info("worker running; SIGTERM or Ctrl-C stops it")
            await stop.wait()

    asyncio.run(run())
    return 0


def _with_database(action: Callable[[Any], Awaitable[int]]) -> int:
    """Run an admin action against the configured (or shared embedded) database."""
    from taskservice.db import migrate
    from taskservice.db.engine import create_engine
    from taskservice.runtime import resolve_database_url

    async def run() -> int:
        settings = get_settings()
        url = await resolve_database_url(settings)
        await migrate.upgrade(url)
        engine = create_engine(url, pool_size=1)
        try:
            return await action(engine)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def cmd_migrate(args: argparse.Namespace) -> int:
    async def report(engine: Any) -> int:
        from taskservice.db import migrate

        print(f"schema at revision {await migrate.current_revision(engine)}")
        return 0

    return _with_database(report)


def cmd_keys(args: argparse.Namespace) -> int:
    from taskservice.auth import valid_tenant
    from taskservice.db.keys import ApiKeyStore

    if args.keys_command == "create" and not valid_tenant(args.tenant):
        print("tenant names are 1-64 of A-Z a-z 0-9 _ . - (starting alphanumeric)", file=sys.stderr)
        return 2

    async def action(engine: Any) -> int:
        keys = ApiKeyStore(engine)
        if args.keys_command == "create":
            key, record = await keys.create(tenant=args.tenant, name=args.name)
            print(key)
            print(
                f"created key {record.id} for tenant {record.tenant!r}; it is shown only this once",
                file=sys.stderr,
            )
            return 0
        if args.keys_command == "list":
            rows = [
                {
                    "id": str(k.id),
                    "tenant": k.tenant,
                    "name": k.name,
                    "prefix": k.prefix,
                    "created_at": k.created_at.isoformat(),
                    "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
                }
                for k in await keys.list_keys(tenant=args.tenant)
            ]
            print(json.dumps(rows, indent=2))
            return 0
        try:
            key_id = uuid.UUID(args.id)
        except ValueError:
            print(f"not a key id: {args.id}", file=sys.stderr)
            return 2
        revoked = await keys.revoke(key_id)
        if revoked is None:
            print(f"no key {args.id}", file=sys.stderr)
            return 1
        print(f"revoked key {revoked.id} of tenant {revoked.tenant!r}")
        return 0

    return _with_database(action)


def cmd_openapi(args: argparse.Namespace) -> int:
    from taskservice.api.app import create_app

    spec = json.dumps(create_app(get_settings()).openapi(), indent=2, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(spec)
    else:
        Path(args.output).write_text(spec)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="taskservice", description=__doc__)
    parser.add_argument("--log-level", default="info")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API (and workers, unless --no-workers)")
    serve.add_argument("--host", help="bind address (TASKSERVICE_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (TASKSERVICE_PORT, default 8000)")
    serve.add_argument("--no-workers", action="store_true", help="API only: run no workers")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run workers only, no HTTP API")
    worker.set_defaults(func=cmd_worker)

    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name")
    listing = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    keys.set_defaults(func=cmd_keys)

    openapi = sub.add_parser("openapi", help="print or write the OpenAPI document")
    openapi.add_argument("--output", "-o", default="-")
    openapi.set_defaults(func=cmd_openapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
