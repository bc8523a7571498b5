"""The state DB: what must outlive Redis (tokens, the audit of changes made through the
manager, and later job runs, Scrapyd nodes, timers, alerts, the error registry and
campaigns). SQLAlchemy 2 models, Alembic migrations shipped in the package and run at
start; SQLite by default, PostgreSQL and MySQL/MariaDB tested."""
