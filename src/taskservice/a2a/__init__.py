"""The A2A binding (protocol 1.0 and 0.3, JSON-RPC): another agent talks to
taskservice as to any A2A agent.

Laid out as the official A2A SDK is, bottom up:

- `errors`: the spec's error kinds, each with its JSON-RPC code, HTTP and gRPC status;
- `conversation`: what a message's parts make of a task's input, and a task's
  history read from its ledger;
- `shapes`: the neutral views the handler answers with (a task with its history, a
  change a stream tells) and how parameters are validated;
- `handler`: the operations (send, get, list, cancel, follow), on the same use cases
  as the REST API (`service.TaskService`), so tenants, limits, idempotency and the
  state machine are the same; independent of any transport and of the version;
- `v03`, `v10`: each version's wire shapes, in and out; `card`: the agent card;
- `jsonrpc`: the JSON-RPC 2.0 adapter of both generations, with the `A2A-Version`
  check.

The HTTP route (`api/routes/a2a.py`) only authenticates and hands the body over.
Push notification configs are not built yet (they answer A2A's error, and the card
says so): register webhooks with `/v1/webhooks`.
"""
