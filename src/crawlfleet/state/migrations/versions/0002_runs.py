"""job runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("open_job", sa.String(200), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.Column("started_by", sa.String(64), nullable=False),
        sa.Column("nodes_max", sa.Integer, nullable=False),
        sa.Column("figures", sa.Text, nullable=False),
        sa.UniqueConstraint("open_job", name="uq_crawlfleet_runs_open_job"),
    )
    once.create_index("ix_crawlfleet_runs_job_started", "crawlfleet_runs", ["job", "started_at"])


def downgrade() -> None:
    op.drop_table("crawlfleet_runs")
