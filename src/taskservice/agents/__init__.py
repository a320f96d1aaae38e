"""The agents: pydantic-ai agents built from profiles (their models, tools and MCP
servers), the built-in models and agents, remote A2A agents."""
