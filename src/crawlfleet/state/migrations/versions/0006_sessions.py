"""dashboard sessions

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_sessions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_hash", sa.String(64), nullable=False),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("session_hash", name="uq_crawlfleet_sessions_hash"),
    )
    once.create_index("ix_crawlfleet_sessions_token_id", "crawlfleet_sessions", ["token_id"])
    once.create_index("ix_crawlfleet_sessions_expires_at", "crawlfleet_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("crawlfleet_sessions")
