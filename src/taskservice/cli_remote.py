"""The `taskservice` verbs that talk to a running service over HTTP, through the
Python client (`taskservice.client`): `submit [--follow]`, `fork ID [--at N]
[--follow]`, `tasks list | get | cancel | pause | resume | input | approve | deny`
`agents list | pause | resume` (the brake) and `usage` (what was spent). `--follow`
exits with the task's final state (`EXIT_CODES`); an unreachable service is exit code
4, a request the service refused (its problem printed as `error: …`) 5, and Ctrl-C
130, saying that the task goes on."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

# `submit --follow` exits with the task's final state.
EXIT_CODES = {"completed": 0, "failed": 1, "cancelled": 2, "input_required": 3}
EXIT_UNREACHABLE = 4
EXIT_REFUSED = 5  # the service answered with a problem (a 4xx, or a 5xx it meant)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it


def _client(args: argparse.Namespace) -> Any:
    from taskservice.client import TaskClient

    url = args.url or os.environ.get("TASKSERVICE_URL", "http://127.0.0.1:8000")
    return TaskClient(url, api_key=args.api_key or os.environ.get("TASKSERVICE_API_KEY"))


def _print(value: object) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _remote(
    action: Callable[[Any, argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    """Run a client action; problems and unreachable servers become exit codes."""

    def run(args: argparse.Namespace) -> int:
        import httpx

        from taskservice.client import TaskServiceError

        async def go() -> int:
            async with _client(args) as client:
                return await action(client, args)

        try:
            return asyncio.run(go())
        except TaskServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        except httpx.TransportError as exc:
            print(f"error: cannot reach the service: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except KeyboardInterrupt:
            # Only this command stops: a task submitted runs on in the service.
            task_id = getattr(args, "submitted", None)
            if task_id is not None:
                print(
                    f"\ninterrupted: task {task_id} goes on in the service; follow it with "
                    f"`taskservice tasks get {task_id} --wait 30`, or stop it with "
                    f"`taskservice tasks cancel {task_id}`",
                    file=sys.stderr,
                )
            else:
                print("\ninterrupted", file=sys.stderr)
            return EXIT_INTERRUPTED

    return run


async def _submit(client: Any, args: argparse.Namespace) -> int:
    metadata = json.loads(args.metadata) if args.metadata else None
    task = await client.submit(
        args.input,
        system_prompt=args.system_prompt,
        agent=args.agent,
        model=args.model,
        context_id=args.context_id,
        metadata=metadata,
        idempotency_key=args.idempotency_key,
        priority=args.priority,
        run_at=args.run_at,
    )
    return await _followed(client, args, task, "submitted")


async def _fork(client: Any, args: argparse.Namespace) -> int:
    metadata = json.loads(args.metadata) if args.metadata else None
    task = await client.fork(
        args.id,
        at=args.at,
        input=args.input,
        system_prompt=args.system_prompt,
        agent=args.agent,
        model=args.model,
        metadata=metadata,
        idempotency_key=args.idempotency_key,
    )
    return await _followed(client, args, task, "forked")


async def _followed(client: Any, args: argparse.Namespace, task: dict[str, Any], how: str) -> int:
    """The task printed as JSON; with `--follow`, its events as they come, then its
    outcome (the exit code says its final state)."""
    if not args.follow:
        _print(task)
        return 0
    args.submitted = task["id"]  # for Ctrl-C's message: the task goes on
    print(f"task {task['id']} {how} (Ctrl-C stops following, not the task)", file=sys.stderr)
    writing = False  # the model's text is being printed as it comes
    async for event in client.stream(task["id"], deltas=True):
        data = event["data"]
        if event["type"] == "delta":
            if data["kind"] == "text":
                if not writing:
                    sys.stderr.write("      ")
                sys.stderr.write(data["text"])
                sys.stderr.flush()
                writing = True
            continue
        if writing:
            sys.stderr.write("\n")
            writing = False
        if event["type"] == "log":
            detail = f"{data['level']}: {data['message']}"
        else:
            detail = data.get("to") or data.get("note") or data.get("name") or ""
        print(f"{event['seq']:>4}  {event['type']:<13} {detail}", file=sys.stderr)
    final = await client.get(task["id"])
    if final["state"] == "completed":
        result = final["result"]
        print(result if isinstance(result, str) else json.dumps(result, indent=2))
    elif final["state"] == "input_required":
        for question in final["input_request"].get("questions", []):
            print(f"question {question['id']}: {question['question']}")
    else:
        print(f"{final['state']}: {json.dumps(final.get('error'))}", file=sys.stderr)
    return EXIT_CODES[final["state"]]


async def _tasks(client: Any, args: argparse.Namespace) -> int:
    if args.tasks_command == "list":
        paused = {"yes": "true", "no": "false"}.get(args.paused or "")
        _print(
            await client.list(
                state=args.state,
                context_id=args.context_id,
                forked_from=args.forked_from,
                limit=args.limit,
                paused=paused,
            )
        )
    elif args.tasks_command == "get":
        _print(await client.get(args.id, wait=args.wait))
    elif args.tasks_command == "cancel":
        _print(await client.cancel(args.id, reason=args.reason))
    elif args.tasks_command == "pause":
        _print(await client.pause(args.id, reason=args.reason))
    elif args.tasks_command == "resume":
        _print(await client.resume(args.id))
    elif args.tasks_command == "approve":
        arguments = json.loads(args.arguments) if args.arguments else None
        _print(await client.approve(args.id, args.call, arguments=arguments))
    elif args.tasks_command == "deny":
        _print(await client.deny(args.id, args.call, reason=args.reason))
    else:
        _print(await client.provide_input(args.id, answer=args.answer))
    return 0


async def _agents(client: Any, args: argparse.Namespace) -> int:
    if args.agents_command == "list":
        _print(await client.agents())
    elif args.agents_command == "pause":
        _print(await client.pause_agent(args.name, reason=args.reason))
    else:
        _print(await client.resume_agent(args.name))
    return 0


# `taskservice usage` without --by: what the console's spend view shows.
_SPEND_VIEW = (("agent",), ("model",), ("day",))


async def _usage(client: Any, args: argparse.Namespace) -> int:
    groupings = [tuple(args.by)] if args.by else list(_SPEND_VIEW)
    reports = [
        await client.usage(
            group_by=grouping,
            since=args.since,
            until=args.until,
            agent=args.agent,
            model=args.model,
            limit=args.limit,
        )
        for grouping in groupings
    ]
    if args.json:
        _print(reports[0] if args.by else reports)
        return 0
    first = reports[0]
    print(f"spend from {first['from']} to {first['to']} (UTC days), in {first['currency']}")
    print(_spend_table([], [("total", first["total"])]))
    for report in reports:
        keys = report["group_by"]
        rows = [(" · ".join(str(g[k]) for k in keys), g) for g in report["groups"]]
        print(f"\nby {' and '.join(keys)}{' (more not shown: --limit)' * report['more']}")
        print(_spend_table(keys, rows) if rows else "  (nothing spent)")
    return 0


def _spend_table(keys: list[str], rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Aligned columns: the group, requests, tokens in and out, cost (`unpriced`
    beside a cost that leaves requests out; `?` when nothing priced is in it)."""
    head = (" · ".join(keys) or "", "requests", "input", "output", "cost")
    lines = [head]
    for name, spent in rows:
        cost = "?" if spent["cost"] is None else f"${spent['cost']}"
        if spent["unpriced_requests"]:
            cost += f" ({spent['unpriced_requests']} unpriced)"
        lines.append(
            (
                name or "-",
                str(spent["requests"]),
                str(spent["input_tokens"]),
                str(spent["output_tokens"]),
                cost,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  "
        + "  ".join(
            cell.ljust(width) if i in (0, 4) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )


def _add_remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the service (TASKSERVICE_URL, default 127.0.0.1:8000)")
    parser.add_argument("--api-key", help="an API key (TASKSERVICE_API_KEY)")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `submit` and `tasks` subcommands, on the command's subparsers."""
    submit = sub.add_parser("submit", help="submit a task (over HTTP)")
    submit.add_argument("input", help="the task for the agent, as text")
    submit.add_argument("--follow", "-f", action="store_true", help="stream events until done")
    submit.add_argument("--system-prompt")
    submit.add_argument("--agent", help="agent profile")
    submit.add_argument("--model")
    submit.add_argument("--context-id")
    submit.add_argument("--metadata", help="a JSON object")
    submit.add_argument("--idempotency-key")
    submit.add_argument("--priority", type=int, help="higher runs first (-1000 … 1000)")
    submit.add_argument("--run-at", help="not before this time (ISO 8601 with an offset)")
    _add_remote(submit)
    submit.set_defaults(func=_remote(_submit))

    fork = sub.add_parser(
        "fork",
        help="a new task from a step of another's conversation (over HTTP)",
        description="A new task whose conversation begins as the first N messages of "
        "task ID's (all of them without --at), and whose run goes on from there: no tool "
        "call before N runs again.",
    )
    fork.add_argument("id", help="the task to fork")
    fork.add_argument("--at", type=int, help="how many of its messages the fork begins with")
    fork.add_argument("--input", help="a message added after them, as the user's next")
    fork.add_argument("--follow", "-f", action="store_true", help="stream events until done")
    fork.add_argument("--system-prompt")
    fork.add_argument("--agent", help="agent profile")
    fork.add_argument("--model")
    fork.add_argument("--metadata", help="a JSON object (replaces the source's)")
    fork.add_argument("--idempotency-key")
    _add_remote(fork)
    fork.set_defaults(func=_remote(_fork))

    tasks = sub.add_parser(
        "tasks",
        help="list, get, cancel, pause, resume or answer tasks, decide on their tool calls "
        "(over HTTP)",
    )
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    listing = tasks_sub.add_parser("list", help="the newest tasks, as JSON")
    listing.add_argument(
        "--state", action="append", help="only tasks in this state (repeat for several)"
    )
    listing.add_argument("--context-id", help="only tasks of this context")
    listing.add_argument("--forked-from", help="only the forks of this task")
    listing.add_argument(
        "--limit", type=int, help="at most this many (default: the service's page size)"
    )
    listing.add_argument(
        "--paused", choices=("yes", "no"), help="only paused tasks (yes), or none of them (no)"
    )
    get = tasks_sub.add_parser("get", help="one task, as JSON")
    get.add_argument("id", help="the task's id")
    get.add_argument(
        "--wait",
        type=float,
        help="wait up to this many seconds for it to finish or ask for input",
    )
    cancel = tasks_sub.add_parser("cancel", help="cancel a task (and its subtasks)")
    cancel.add_argument("id", help="the task's id")
    cancel.add_argument("--reason", help="kept with the task")
    pause = tasks_sub.add_parser(
        "pause", help="pause a task: not run until resumed (a running one stops, keeping its work)"
    )
    pause.add_argument("id", help="the task's id")
    pause.add_argument("--reason", help="kept with the task")
    resume = tasks_sub.add_parser("resume", help="resume a paused task from where it stopped")
    resume.add_argument("id", help="the task's id")
    answer = tasks_sub.add_parser("input", help="answer a task waiting for input")
    answer.add_argument("id", help="the task's id")
    answer.add_argument("answer", help="the answer, as text")
    approve = tasks_sub.add_parser("approve", help="approve a tool call the task waits on")
    deny = tasks_sub.add_parser("deny", help="deny a tool call the task waits on")
    for decision in (approve, deny):
        decision.add_argument("id", help="the task's id")
        decision.add_argument("call", nargs="?", help="the tool call's id (if it waits on several)")
    approve.add_argument("--arguments", help="a JSON object: the call's arguments instead")
    deny.add_argument("--reason", help="why (the model reads it as the call's result)")
    for command in (listing, get, cancel, pause, resume, answer, approve, deny):
        _add_remote(command)
    tasks.set_defaults(func=_remote(_tasks))

    agents = sub.add_parser(
        "agents", help="list agent profiles; pause or resume all of a profile's tasks (over HTTP)"
    )
    agents_sub = agents.add_subparsers(dest="agents_command", required=True)
    agents_list = agents_sub.add_parser("list", help="the agent profiles and their brakes, as JSON")
    brake = agents_sub.add_parser(
        "pause", help="the brake: pause every task of a profile and hold new ones"
    )
    brake.add_argument("name", help="the agent profile")
    brake.add_argument("--reason", help="kept with the brake and its tasks")
    release = agents_sub.add_parser("resume", help="release the brake: resume the tasks it paused")
    release.add_argument("name", help="the agent profile")
    for command in (agents_list, brake, release):
        _add_remote(command)
    agents.set_defaults(func=_remote(_agents))

    usage = sub.add_parser(
        "usage",
        help="what the tenant's model requests spent: tokens, requests, cost (over HTTP)",
        description="Without --by: the total, then by agent profile, by model and by day, "
        "as the console's spend view shows them.",
    )
    usage.add_argument(
        "--by",
        action="append",
        choices=["agent", "model", "day", "context"],
        help="group by this (repeatable: together)",
    )
    usage.add_argument("--from", dest="since", help="the first UTC day, YYYY-MM-DD")
    usage.add_argument("--to", dest="until", help="the last UTC day (included), YYYY-MM-DD")
    usage.add_argument("--agent", help="only this agent profile")
    usage.add_argument("--model", help="only this model")
    usage.add_argument("--limit", type=int, help="groups at most (default 100)")
    usage.add_argument("--json", action="store_true", help="the answers as JSON")
    _add_remote(usage)
    usage.set_defaults(func=_remote(_usage))
