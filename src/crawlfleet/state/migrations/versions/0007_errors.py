"""the error registry

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from crawlfleet.state.migrations import once

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# as written in this revision (up to 16 MiB on MariaDB too)
BIG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
BIG_BINARY = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def upgrade() -> None:
    once.create_table(
        "crawlfleet_errors",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("site", sa.String(255), nullable=False),
        sa.Column("unit", sa.String(200), nullable=True),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(500), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("recrawls", sa.Integer, nullable=False),
        sa.Column("first_seen", sa.DateTime, nullable=False),
        sa.Column("last_seen", sa.DateTime, nullable=False),
        sa.Column("node", sa.String(100), nullable=False),
        sa.Column("stack", BIG_TEXT, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("resolved_at", sa.DateTime, nullable=True),
        sa.Column("payload", BIG_BINARY, nullable=True),
        sa.UniqueConstraint("job", "fingerprint", name="uq_crawlfleet_errors_job_fp"),
    )
    once.create_index(
        "ix_crawlfleet_errors_job_state", "crawlfleet_errors", ["job", "state", "reason"]
    )


def downgrade() -> None:
    op.drop_table("crawlfleet_errors")
