"""campaigns and their task units

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_campaigns",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("spider", sa.String(500), nullable=False),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_unit", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("units_ahead", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=True),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.UniqueConstraint("name", name="uq_crawlfleet_campaigns_name"),
    )
    once.create_table(
        "crawlfleet_campaign_units",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("campaign_id", sa.Integer, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("node", sa.String(100), nullable=True),
        sa.Column("lease_until", sa.DateTime, nullable=True),
        sa.Column("fed_at", sa.DateTime, nullable=True),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.UniqueConstraint("campaign_id", "idx", name="uq_crawlfleet_units_campaign_idx"),
    )
    once.create_index(
        "ix_crawlfleet_units_campaign_state", "crawlfleet_campaign_units", ["campaign_id", "state"]
    )


def downgrade() -> None:
    op.drop_table("crawlfleet_campaign_units")
    op.drop_table("crawlfleet_campaigns")
