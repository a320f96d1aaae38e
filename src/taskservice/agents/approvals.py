"""Tool calls that wait for a person's approval: an agent profile names the tools
(`approve`: names or shell-style patterns, for its built-in tools, its MCP servers'
tools and `ask_agent`, the delegation to another agent), and every toolset of its
agents is wrapped in pydantic-ai's `ApprovalRequiredToolset`. A call of such a tool
is not made: pydantic-ai hands it back as a `DeferredToolRequests.approvals` entry
(the run's output), the task waits in `input_required`, and the run that resumes it
passes the decision as `DeferredToolResults.approvals` (`worker/resume.py`): an
approved call is then made, with the arguments the person may have edited, and a
denied one returns the reason to the model as its result.

The only addition to pydantic-ai's toolset: the request carries the tool's argument
schema (`ApprovalRequired` metadata), so that edited arguments are checked against
it when the answer arrives, before the run resumes (a 422 then, not a failed call
later).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from taskservice.agents.tools import RunHooks

OnTimeout = Literal["deny", "fail"]
APPROVAL_KEYS = frozenset(
    {"approve", "approval_note", "approval_timeout_seconds", "approval_timeout"}
)


class ApprovalConfigError(ValueError):
    """A profile's approval settings are invalid."""


@dataclass(frozen=True, slots=True)
class Approvals:
    """Which of a profile's tool calls wait for a person (`tools`: names or
    patterns), the note shown with each request, how long it may wait (None: as long
    as it takes) and what happens then: `deny` (the call is denied and the run goes
    on) or `fail` (the task fails with `approval_timeout`)."""

    tools: tuple[str, ...] = ()
    note: str = ""
    timeout_seconds: float | None = None
    on_timeout: OnTimeout = "deny"

    def required(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)

    @classmethod
    def parse(cls, profile: str, spec: dict[str, Any]) -> Approvals:
        """From a profile's `approve`, `approval_note`, `approval_timeout_seconds` and
        `approval_timeout` keys."""
        tools = spec.get("approve", [])
        if isinstance(tools, str):
            tools = [tools]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise ApprovalConfigError(
                f"profile {profile!r}: approve is a list of tool names or patterns"
            )
        timeout = spec.get("approval_timeout_seconds")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ApprovalConfigError(
                f"profile {profile!r}: approval_timeout_seconds is a number of seconds above 0"
            )
        on_timeout = spec.get("approval_timeout", "deny")
        if on_timeout not in ("deny", "fail"):
            raise ApprovalConfigError(f"profile {profile!r}: approval_timeout is 'deny' or 'fail'")
        return cls(
            tools=tuple(tools),
            note=str(spec.get("approval_note", "")),
            timeout_seconds=float(timeout) if timeout is not None else None,
            on_timeout=on_timeout,
        )


@dataclass
class NeedsApproval(ApprovalRequiredToolset[RunHooks]):
    """pydantic-ai's `ApprovalRequiredToolset`, whose approval request also carries
    the tool's argument schema."""

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[RunHooks],
        tool: ToolsetTool[RunHooks],
    ) -> Any:
        if not ctx.tool_call_approved and self.approval_required_func(
            ctx, tool.tool_def, tool_args
        ):
            raise ApprovalRequired(metadata={"schema": tool.tool_def.parameters_json_schema})
        # The wrapped toolset's call, as `ApprovalRequiredToolset` makes it once approved.
        return await WrapperToolset.call_tool(self, name, tool_args, ctx, tool)


def with_approvals(
    toolset: AbstractToolset[RunHooks], approvals: Approvals
) -> AbstractToolset[RunHooks]:
    """`toolset`, its calls of the tools `approvals` names waiting for a person."""
    if not approvals.tools:
        return toolset

    def required(ctx: RunContext[RunHooks], tool: ToolDefinition, args: dict[str, Any]) -> bool:
        return approvals.required(tool.name)

    return NeedsApproval(toolset, approval_required_func=required)
