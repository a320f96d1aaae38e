"""The webhook sender's adapters: its HTTP client, pinned to checked addresses
(`http`), Standard Webhooks signatures (`signing`) and the SSRF checks of a target
(`targets`, which agents' MCP servers and remote agents are held to as well).

The outbox is `db/webhook_outbox.py`, the dispatcher that claims and sends its
deliveries `worker/webhook_dispatcher.py`; subscriptions are registered through
`usecases/subscriptions.py`, and webhooks as values are `domain/webhooks.py`.
"""
