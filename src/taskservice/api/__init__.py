"""The REST transport: a thin FastAPI adapter over `TaskService`."""
