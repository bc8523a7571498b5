"""alert rules, alerts and their deliveries

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlfleet.state.migrations import once

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    once.create_table(
        "crawlfleet_alert_rules",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("job", sa.String(200), nullable=True),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("op", sa.String(2), nullable=False),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("for_seconds", sa.Float, nullable=False),
        sa.Column("webhook_url", sa.String(1000), nullable=False),
        sa.Column("secret", sa.String(200), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_crawlfleet_alert_rules_name"),
    )
    once.create_table(
        "crawlfleet_alerts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("rule_id", sa.Integer, nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("open_key", sa.String(300), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime, nullable=False),
        sa.Column("fired_at", sa.DateTime, nullable=True),
        sa.Column("resolved_at", sa.DateTime, nullable=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.UniqueConstraint("open_key", name="uq_crawlfleet_alerts_open_key"),
    )
    once.create_index("ix_crawlfleet_alerts_rule", "crawlfleet_alerts", ["rule_id", "since"])
    once.create_table(
        "crawlfleet_deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("alert_id", sa.Integer, nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
    )
    once.create_index("ix_crawlfleet_deliveries_alert", "crawlfleet_deliveries", ["alert_id", "at"])


def downgrade() -> None:
    op.drop_table("crawlfleet_deliveries")
    op.drop_table("crawlfleet_alerts")
    op.drop_table("crawlfleet_alert_rules")
