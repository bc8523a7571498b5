"""crawlfleet settings: documented defaults and typed, validated access."""

from __future__ import annotations

from crawlfleet.settings.access import defaults

__all__ = ["defaults"]
