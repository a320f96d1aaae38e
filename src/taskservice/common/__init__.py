"""What every layer uses and that knows none of them: asyncio helpers, logs,
metrics, traces, the rate-limit grammar."""
