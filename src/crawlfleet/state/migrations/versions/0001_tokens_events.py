"""tokens and events

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("last_used_at", sa.DateTime, nullable=True),
        sa.Column("revoked_at", sa.DateTime, nullable=True),
        sa.UniqueConstraint("token_hash", name="uq_crawlfleet_tokens_token_hash"),
    )
    once.create_index("ix_crawlfleet_tokens_name", "crawlfleet_tokens", ["name"])
    once.create_table(
        "crawlfleet_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("job", sa.String(200), nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
    )
    once.create_index("ix_crawlfleet_events_at", "crawlfleet_events", ["at"])
    once.create_index("ix_crawlfleet_events_job_at", "crawlfleet_events", ["job", "at"])


def downgrade() -> None:
    op.drop_table("crawlfleet_events")
    op.drop_table("crawlfleet_tokens")
