"""Scrapyd nodes and the processes started on them

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_scrapyd",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("username", sa.String(200), nullable=True),
        sa.Column("password", sa.String(500), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_crawlfleet_scrapyd_name"),
    )
    once.create_table(
        "crawlfleet_processes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("scrapyd", sa.String(64), nullable=False),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("spider", sa.String(200), nullable=False),
        sa.Column("scrapyd_job", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_by", sa.String(64), nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.Column("note", sa.Text, nullable=False),
    )
    once.create_index("ix_crawlfleet_processes_job", "crawlfleet_processes", ["job", "started_at"])


def downgrade() -> None:
    op.drop_table("crawlfleet_processes")
    op.drop_table("crawlfleet_scrapyd")
