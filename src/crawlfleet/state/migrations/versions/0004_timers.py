"""timers and their fires

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_timers",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("next_fire_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_crawlfleet_timers_name"),
    )
    once.create_index("ix_crawlfleet_timers_next_fire_at", "crawlfleet_timers", ["next_fire_at"])
    once.create_table(
        "crawlfleet_timer_fires",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("timer_id", sa.Integer, nullable=False),
        sa.Column("due_at", sa.DateTime, nullable=False),
        sa.Column("fired_at", sa.DateTime, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
    )
    once.create_index(
        "ix_crawlfleet_timer_fires_timer", "crawlfleet_timer_fires", ["timer_id", "due_at"]
    )


def downgrade() -> None:
    op.drop_table("crawlfleet_timer_fires")
    op.drop_table("crawlfleet_timers")
