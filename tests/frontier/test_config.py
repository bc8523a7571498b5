"""Settings are validated at start-up, and errors name the setting."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.settings import Settings

from crawlfleet.addon import Addon
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.redis.config import RedisConfig
from crawlfleet.settings.config import settings_with_defaults


def frontier(**values: Any) -> FrontierConfig:
    return FrontierConfig.from_settings(settings_with_defaults(values), "spider")


def test_defaults_are_valid() -> None:
    config = frontier()
    assert config.job == "spider" and config.seen_mode == "exact"
    assert config.prefetch == 16  # Scrapy's CONCURRENT_REQUESTS
    assert config.items_pending_max == 200


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"CRAWLFLEET_SEEN_MODE": "fuzzy"}, "CRAWLFLEET_SEEN_MODE must be one of 'exact', 'bloom'"),
        (
            {"CRAWLFLEET_SITE_KEY": "port"},
            "CRAWLFLEET_SITE_KEY must be one of 'host', 'domain', 'ip'",
        ),
        ({"CRAWLFLEET_LEASE_SECONDS": "soon"}, "CRAWLFLEET_LEASE_SECONDS must be a number"),
        ({"CRAWLFLEET_LEASE_SECONDS": 0.5}, "CRAWLFLEET_LEASE_SECONDS must be >= 1"),
        ({"CRAWLFLEET_FLUSH_BATCH": 0}, "CRAWLFLEET_FLUSH_BATCH must be >= 1"),
        ({"CRAWLFLEET_PREFETCH": True}, "CRAWLFLEET_PREFETCH must be an integer"),
        ({"CRAWLFLEET_BLOOM_ERROR_RATE": 0.7}, "CRAWLFLEET_BLOOM_ERROR_RATE must be < 0.5"),
        ({"CRAWLFLEET_HEARTBEAT_SECONDS": 20}, "at most half of CRAWLFLEET_LEASE_SECONDS"),
        ({"CRAWLFLEET_CLOSE_WHEN_FINISHED": "maybe"}, "CRAWLFLEET_CLOSE_WHEN_FINISHED must be"),
        ({"CRAWLFLEET_JOB": "a job"}, "job name must be"),
        ({"CRAWLFLEET_LEASE_SECOND": 3}, "unknown setting CRAWLFLEET_LEASE_SECOND"),
        ({"CRAWLFLEET_START_URLS_KEY": "%(nope)s"}, "CRAWLFLEET_START_URLS_KEY may only use"),
        ({"CRAWLFLEET_NODE_TIMEOUT_SECONDS": 3}, "at least twice CRAWLFLEET_HEARTBEAT_SECONDS"),
        (
            {"CRAWLFLEET_RATE_LIMIT_SCOPE": "planet"},
            "CRAWLFLEET_RATE_LIMIT_SCOPE must be one of 'site', 'ip', 'type', 'type.ip'; got",
        ),
        (
            {"CRAWLFLEET_RATE_LIMIT_SCOPE": "ip", "CRAWLFLEET_NODE_IP": "10.0.0.300"},
            "CRAWLFLEET_NODE_IP must be an IP address",
        ),
        (
            {"CRAWLFLEET_RATE_LIMIT_SCOPE": "type", "CRAWLFLEET_CRAWLER_TYPE": "a b"},
            "CRAWLFLEET_CRAWLER_TYPE must be a name",
        ),
        ({"CRAWLFLEET_BACKOFF_STATUSES": "429,teapot"}, "must list HTTP statuses, got 'teapot'"),
        (
            {"CRAWLFLEET_BACKOFF_MAX_SECONDS": 0.5},
            "CRAWLFLEET_BACKOFF_MAX_SECONDS must be at least CRAWLFLEET_BACKOFF_START_SECONDS",
        ),
        ({"CRAWLFLEET_BACKOFF_LATENCY_FACTOR": 0.5}, "must be 0 (off) or above 1"),
        ({"CRAWLFLEET_ITEMS_PENDING_MAX": 0}, "CRAWLFLEET_ITEMS_PENDING_MAX must be >= 1, got 0"),
        (
            {"CRAWLFLEET_ITEMS_PENDING_MAX": "many"},
            "CRAWLFLEET_ITEMS_PENDING_MAX must be an integer, got 'many'",
        ),
    ],
)
def test_bad_values_name_the_setting(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        frontier(**values)


def test_rate_limit_scopes_name_the_budget() -> None:
    assert frontier().budget_scope == ""
    typed = frontier(CRAWLFLEET_RATE_LIMIT_SCOPE="type", CRAWLFLEET_JOB="j")
    assert typed.budget_scope == "|type=spider"  # the spider's name by default
    both = frontier(
        CRAWLFLEET_RATE_LIMIT_SCOPE="type+ip",
        CRAWLFLEET_CRAWLER_TYPE="news",
        CRAWLFLEET_NODE_IP="10.1.2.3",
    )
    assert both.budget_scope == "|type=news|ip=10.1.2.3"
    # without CRAWLFLEET_NODE_IP: the address this machine reaches Redis from
    auto = frontier(CRAWLFLEET_RATE_LIMIT_SCOPE="ip", CRAWLFLEET_REDIS_URL="redis://127.0.0.1:1")
    assert auto.budget_scope == "|ip=127.0.0.1"
    statuses = frontier(CRAWLFLEET_BACKOFF_STATUSES="[503]").backoff.statuses
    assert statuses == frozenset({503})


def test_false_and_zero_can_be_set() -> None:
    config = frontier(CRAWLFLEET_CLOSE_WHEN_FINISHED=False, CRAWLFLEET_FINISH_GRACE_SECONDS=0)
    assert config.close_when_finished is False and config.finish_grace_seconds == 0


def test_redis_url_is_checked_and_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="CRAWLFLEET_REDIS_URL must start with"):
        RedisConfig.from_settings(settings_with_defaults({"CRAWLFLEET_REDIS_URL": "localhost"}))
    monkeypatch.setenv("CRAWLFLEET_REDIS_URL", "redis://127.0.0.1:1/0")
    settings = Settings({"CRAWLFLEET_REDIS_URL": "redis://from-project:6379"})
    Addon().update_settings(settings)
    assert RedisConfig.from_settings(settings).url == "redis://127.0.0.1:1/0"
    # -s on the command line still wins
    config = RedisConfig.from_settings(
        settings_with_defaults({"CRAWLFLEET_REDIS_URL": "redis://cmdline:6379"})
    )
    assert config.url == "redis://cmdline:6379"


def test_the_addon_turns_cookies_off_unless_the_project_keeps_them() -> None:
    settings = Settings()
    Addon().update_settings(settings)
    assert settings.getbool("COOKIES_ENABLED") is False
    kept = Settings()
    kept.set("COOKIES_ENABLED", True, priority="project")
    Addon().update_settings(kept)
    assert kept.getbool("COOKIES_ENABLED") is True
    # the identity and ban middlewares are enabled: off until configured, on by default
    assert "crawlfleet.middlewares.useragent.BrowserHeaders" in settings["DOWNLOADER_MIDDLEWARES"]
    assert settings["DOWNLOADER_MIDDLEWARES"]["crawlfleet.middlewares.bans.BanDetector"] == 555


def test_a_component_the_project_placed_by_class_stays_where_it_put_it() -> None:
    """SPIDER_MIDDLEWARES = {KnownDuplicates: None} turns the add-on's middleware off as
    its dotted path does (the add-on used to add the path beside the class, and Scrapy
    kept the path's order); Scrapy's RetryMiddleware placed by class stays placed."""
    from scrapy.downloadermiddlewares.retry import RetryMiddleware

    from crawlfleet.middlewares.duplicates import KnownDuplicates
    from crawlfleet.middlewares.sendtime import GiveWay

    settings = Settings()
    settings.set("SPIDER_MIDDLEWARES", {KnownDuplicates: None, GiveWay: 7}, priority="project")
    settings.set("DOWNLOADER_MIDDLEWARES", {RetryMiddleware: 600}, priority="project")
    Addon().update_settings(settings)
    spider = settings.get_component_priority_dict_with_base("SPIDER_MIDDLEWARES")
    assert spider[KnownDuplicates] is None and spider[GiveWay] == 7
    downloader = settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    assert downloader[RetryMiddleware] == 600


def test_components_that_are_off_are_not_loaded_unless_their_setting_is_on() -> None:
    cookies = "scrapy.downloadermiddlewares.cookies.CookiesMiddleware"
    remote = "scrapy.extensions.remote_control.RemoteControl"
    settings = Settings()
    Addon().update_settings(settings)
    # out of the *_BASE dicts: Scrapy imports every key of the others, even a None
    assert cookies not in settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    assert remote not in settings.get_component_priority_dict_with_base("EXTENSIONS")
    on = Settings()
    on.set("COOKIES_ENABLED", True, priority="project")
    on.set("REMOTE_CONTROL_ENABLED", True, priority="project")
    Addon().update_settings(on)
    assert on.getwithbase("DOWNLOADER_MIDDLEWARES")[cookies] == 700  # Scrapy's own place
    assert on.getwithbase("EXTENSIONS")[remote] == 0
    placed = Settings()
    placed.set("DOWNLOADER_MIDDLEWARES", {cookies: 701}, priority="project")
    Addon().update_settings(placed)
    assert placed.getwithbase("DOWNLOADER_MIDDLEWARES")[cookies] == 701  # the project's


def test_the_addon_holds_slotted_requests_at_the_wire_unless_the_project_says_otherwise() -> None:
    """Its download handler for http and https (slotted requests leave at their slots),
    not where the project named its own (scrapy-playwright's) or turned SendTime off
    (what misses its slot at the wire comes back through it)."""
    from crawlfleet.addon import SEND_TIME, SEND_TIME_HANDLER, waits_at_wire

    settings = Settings()
    Addon().update_settings(settings)
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    assert handlers["http"] == handlers["https"] == SEND_TIME_HANDLER
    assert waits_at_wire(settings)
    playwright = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
    own = Settings({"DOWNLOAD_HANDLERS": {"http": playwright, "https": playwright}})
    Addon().update_settings(own)
    assert own.getwithbase("DOWNLOAD_HANDLERS")["https"] == playwright
    assert not waits_at_wire(own)
    off = Settings({"DOWNLOADER_MIDDLEWARES": {SEND_TIME: None}})
    Addon().update_settings(off)
    assert "http" not in off["DOWNLOAD_HANDLERS"]
    assert not waits_at_wire(off)
