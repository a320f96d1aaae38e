"""The `taskservice` command: serve, worker, migrate, keys, prune, settings, openapi;
and the client's verbs (submit, tasks), in `cli_remote`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from taskservice import cli_remote
from taskservice.common.logs import configure
from taskservice.settings import Settings, get_settings

log = logging.getLogger("taskservice")


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "log_level"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "no_workers", False):
        overrides["workers_enabled"] = False
    if getattr(args, "no_webhooks", False):
        overrides["webhooks_enabled"] = False
    return get_settings(**overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    from taskservice import serving

    settings = _settings(args)
    processes = args.processes or settings.processes or serving.cores()
    return serving.serve(settings, processes=processes, access_log=args.access_log)


def cmd_worker(args: argparse.Namespace) -> int:
    from taskservice.a2a.push import FORMATS
    from taskservice.runtime import Runtime
    from taskservice.serving import freeze_heap

    settings = _settings(args)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Runtime.open(settings, api=False, workers=True, push_formats=FORMATS):
            freeze_heap()
            kind = type(loop).__module__.partition(".")[0]  # uvloop or asyncio
            log.info("worker running on %s; SIGTERM or Ctrl-C stops it", kind)
            await stop.wait()

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(run())
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (uvicorn[standard] brings it), as `serve` runs:
    the event loop is a good part of a worker's own CPU per task."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _with_database(action: Callable[[Any], Awaitable[int]]) -> int:
    """Run an admin action against the configured (or shared embedded) database."""
    from taskservice.db import migrate
    from taskservice.db.embedded import resolve_database_url
    from taskservice.db.engine import create_engine

    async def run() -> int:
        settings = get_settings()
        url = await resolve_database_url(settings)
        upgraded = await migrate.upgrade(url)
        if upgraded.steps:  # one line; each step at --log-level debug
            log.info("database %s", upgraded.describe())
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
    from taskservice.db.keys import ApiKeyStore
    from taskservice.usecases.auth import valid_tenant

    if args.keys_command == "create" and not valid_tenant(args.tenant):
        print("tenant names are 1-64 of A-Z a-z 0-9 _ . - (starting alphanumeric)", file=sys.stderr)
        return 2

    async def action(engine: Any) -> int:
        keys = ApiKeyStore(engine)
        if args.keys_command == "create":
            key, record = await keys.create(tenant=args.tenant, name=args.name, admin=args.admin)
            print(key)
            kind = "an admin key" if record.admin else "key"
            print(
                f"created {kind} {record.id} for tenant {record.tenant!r}; it is shown only "
                "this once",
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
                    "admin": k.admin,
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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*$")
_UNIT_DAYS = {"d": 1.0, "": 1.0, "h": 1 / 24, "m": 1 / 1440, "s": 1 / 86400}


def _days(duration: str) -> float:
    """`30d`, `12h`, `90m`, `45s` (or a bare number of days) in days."""
    matched = _DURATION.match(duration)
    if matched is None:
        raise argparse.ArgumentTypeError(f"not a duration: {duration!r} (e.g. 30d, 12h)")
    return float(matched.group(1)) * _UNIT_DAYS[matched.group(2)]


def cmd_prune(args: argparse.Namespace) -> int:
    from taskservice.db.retention import Policy, RetentionStore, prune, retention_policy
    from taskservice.db.sql import Database

    settings = get_settings()
    policy = (
        Policy(days=args.older_than, by_tenant={})
        if args.older_than is not None
        else retention_policy(settings)
    )
    if not policy.prunes:
        print(
            "nothing to prune by: pass --older-than, or set TASKSERVICE_RETENTION_DAYS "
            "(or RETENTION_DAYS_BY_TENANT)",
            file=sys.stderr,
        )
        return 2

    async def action(engine: Any) -> int:
        url = engine.url.render_as_string(hide_password=False)
        async with Database(url, pool_size=1) as db:
            pruned = await prune(RetentionStore(db), policy, dry_run=args.dry_run)
        if pruned is None:
            print("another process is pruning now; try again later", file=sys.stderr)
            return 1
        report = {"dry_run": args.dry_run, **vars(pruned)}
        print(json.dumps(report))
        return 0

    return _with_database(action)


_SECRETS = ("openai_api_key", "stream_token_secret")


def cmd_settings(args: argparse.Namespace) -> int:
    from taskservice.settings import markdown_table

    if args.markdown:
        sys.stdout.write(markdown_table())
        return 0
    settings = get_settings()
    for name, value in settings.model_dump(mode="json").items():
        if name in _SECRETS and value:
            value = "(set)"
        elif name == "database_url" and value:
            from taskservice.db.engine import hide_password

            value = hide_password(value)
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        print(f"TASKSERVICE_{name.upper()}={'' if value is None else value}")
    return 0


def cmd_openapi(args: argparse.Namespace) -> int:
    from taskservice.api.app import create_app

    spec = json.dumps(create_app(get_settings()).openapi(), indent=2, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(spec)
    else:
        Path(args.output).write_text(spec)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taskservice",
        description="Run LLM sub-agents as durable tasks: serve the API and workers, "
        "manage the database and API keys, and submit and manage tasks over HTTP.",
        epilog="`taskservice COMMAND --help` for a command's options. "
        "Docs: docs/ (mkdocs serve), and /docs on a running service.",
    )
    parser.add_argument("--log-level", help="debug, info, warning, error (TASKSERVICE_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API (and workers, unless --no-workers)")
    serve.add_argument("--host", help="bind address (TASKSERVICE_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (TASKSERVICE_PORT, default 8000)")
    serve.add_argument("--no-workers", action="store_true", help="API only: run no workers")
    serve.add_argument(
        "--no-webhooks", action="store_true", help="run no webhook dispatcher in this process"
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument(
        "--processes",
        type=_positive,
        metavar="N",
        help="processes serving the port, each with the API and workers "
        "(TASKSERVICE_PROCESSES; default: one per core)",
    )
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run workers (and the webhook dispatcher), no HTTP API")
    worker.add_argument(
        "--no-webhooks", action="store_true", help="run no webhook dispatcher in this process"
    )
    worker.set_defaults(func=cmd_worker)

    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name")
    create.add_argument(
        "--admin",
        action="store_true",
        help="an operator's key: it may also call the admin routes (e.g. set a tenant's "
        "spend budget); only this command makes one",
    )
    listing = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    keys.set_defaults(func=cmd_keys)

    cli_remote.add_commands(sub)

    pruning = sub.add_parser(
        "prune", help="delete finished tasks past their retention (or --older-than)"
    )
    pruning.add_argument(
        "--older-than", type=_days, metavar="DURATION", help="e.g. 30d, 12h (every tenant)"
    )
    pruning.add_argument(
        "--dry-run", action="store_true", help="count what would go; delete nothing"
    )
    pruning.set_defaults(func=cmd_prune)

    config = sub.add_parser("settings", help="print the settings in effect (secrets hidden)")
    config.add_argument(
        "--markdown", action="store_true", help="the documentation's table of every setting instead"
    )
    config.set_defaults(func=cmd_settings)

    openapi = sub.add_parser("openapi", help="print or write the OpenAPI document")
    openapi.add_argument("--output", "-o", default="-")
    openapi.set_defaults(func=cmd_openapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pydantic import ValidationError

    args = build_parser().parse_args(argv)
    try:
        settings = get_settings()
    except ValidationError as exc:
        print(f"error: a TASKSERVICE_ setting is not valid: {exc}", file=sys.stderr)
        return 2
    configure(args.log_level or settings.log_level, settings.log_format)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
