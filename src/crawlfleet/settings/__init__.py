"""crawlfleet settings: documented defaults and typed, validated access."""

from __future__ import annotations

from crawlfleet.settings.config import FrontierConfig, RedisConfig, defaults

__all__ = ["FrontierConfig", "RedisConfig", "defaults"]
