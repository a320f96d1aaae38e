"""Everything that speaks SQL: engine, tables, embedded server, migrations, stores."""

from sqlalchemy.exc import SQLAlchemyError

# What a caller may treat as "the database is unavailable right now, retry later".
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError)
