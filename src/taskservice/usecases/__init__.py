"""The use cases: what the transports (REST, A2A, MCP) and the runners ask of the service."""
