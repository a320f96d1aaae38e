"""The A2A binding (protocol 0.3): another agent talks to taskservice as to any A2A
agent.

Three parts, the shape of the official A2A SDK:

- `protocol`: the mapping between A2A and taskservice: states, message parts, the
  task, status and artifact objects, the agent card, the error codes;
- `handler`: the methods (send a message, get, cancel, stream the updates), on the
  same use cases as the REST API (`service.TaskService`), so tenants, limits,
  idempotency and the state machine are the same; independent of any transport;
- `jsonrpc`: the JSON-RPC 2.0 adapter: parse a request, call the handler, answer
  with a response, or with a stream of them for the streaming methods.

The HTTP route (`api/routes/a2a.py`) only authenticates and hands the body over.
Push notification configs are not built (they answer A2A's error, and the card
says so): register webhooks with `/v1/webhooks`.
"""
