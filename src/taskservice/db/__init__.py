"""Everything that speaks SQL: engine, tables, embedded server, migrations, stores."""

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from taskservice.errors import DatabaseUnavailable

# What a background loop may treat as "retry later" (it logs and carries on).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    SQLAlchemyError,
    OSError,
)


def is_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached right now (down, restarted, pool exhausted): the
    request did not happen and may be retried. Anything else is a bug."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc, DatabaseUnavailable | OperationalError | InterfaceError | PoolTimeout | OSError
    )
