"""sealed secrets: the columns that keep them grow to Text (a sealed value is longer)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: table -> (column, its type before, nullable)
_GROWN = {
    "crawlfleet_scrapyd": [("password", sa.String(500), True)],
    "crawlfleet_alert_rules": [
        ("webhook_url", sa.String(1000), False),
        ("secret", sa.String(200), False),
    ],
}


def upgrade() -> None:
    for table, columns in _GROWN.items():
        with op.batch_alter_table(table) as batch:
            for name, before, nullable in columns:
                batch.alter_column(name, existing_type=before, type_=sa.Text, nullable=nullable)


def downgrade() -> None:
    for table, columns in _GROWN.items():
        with op.batch_alter_table(table) as batch:
            for name, before, nullable in columns:
                batch.alter_column(name, existing_type=sa.Text, type_=before, nullable=nullable)
