"""The A2A binding (protocol 1.0 over JSON-RPC and HTTP+JSON, 0.3 over JSON-RPC):
another agent talks to taskservice as to any A2A agent.

Laid out as the official A2A SDK is, bottom up (the order its import contract keeps):

- `errors`: the spec's error kinds, each with its JSON-RPC code, HTTP and gRPC status;
- `conversation`: what a message's parts make of a task's input, and a task's
  history read from its ledger;
- `shapes`: the neutral views the handler answers with (a task with its history, a
  change a stream tells) and how parameters are validated;
- `v03`, `v10`: each version's wire shapes, in and out; `card`: the agent card;
- `push`: push notification configs on the webhook machinery, and the bodies the
  dispatcher sends for them;
- `handler`: the operations (send, get, list, cancel, follow), on the same use cases
  as the REST API (`usecases/tasks.TaskService`), so tenants, limits, idempotency and
  the state machine are the same; independent of any transport and of the version;
- `methods`: every method of both generations, read from a JSON object of
  parameters and answered in its version's shapes, and the `A2A-Version` check;
- `jsonrpc`, `rest`: the bindings, JSON-RPC 2.0 (both generations) and HTTP+JSON
  (1.0): each only unwraps a request into a method's parameters and wraps its answer.

The HTTP routes (`api/routes/a2a.py`, `api/routes/a2a_rest.py`) only authenticate and
hand the request over.
Push notification configs (`push`) are task webhooks with what A2A adds.
"""
