"""The revisit settings: read into a policy, and every wrong value refused in one line
naming the setting (a rule: its index and key), at the add-on's check too."""

from __future__ import annotations

import re
from typing import Any

import pytest

from crawlfleet.addon import check
from crawlfleet.exceptions import ConfigError
from crawlfleet.revisit.config import revisit_mode, revisit_policy
from crawlfleet.settings.config import settings_with_defaults


def policy(**values: Any) -> Any:
    return revisit_policy(settings_with_defaults(values))


def test_defaults_and_rules() -> None:
    assert revisit_mode(settings_with_defaults()) == "off"
    p = policy(
        CRAWLFLEET_REVISIT="adaptive",
        CRAWLFLEET_REVISIT_RULES=[
            {"pattern": "/list", "interval": 3600, "min": 600, "max": 7200},
            {"pattern": r"\.pdf$", "policy": "off"},
            {"pattern": "/news/", "policy": "fixed", "interval": 900, "min": 60},
        ],
        CRAWLFLEET_REVISIT_IGNORE_FIELDS="seen,token",
        CRAWLFLEET_REVISIT_GONE_AFTER=2,
    )
    assert p.default.policy == "adaptive" and p.default.interval == 86400
    assert (p.default.min_seconds, p.default.max_seconds) == (3600, 30 * 86400)
    listing = p.rule_for("http://a.test/list?page=2")
    assert (listing.policy, listing.interval, listing.min_seconds) == ("adaptive", 3600, 600)
    assert not p.tracks("http://a.test/x.pdf")
    assert p.rule_for("http://a.test/news/1").policy == "fixed"
    assert p.ignore_fields == {"seen", "token"} and p.gone_after == 2 and p.conditional
    # from -s or the environment: a JSON array
    p = policy(
        CRAWLFLEET_REVISIT="fixed", CRAWLFLEET_REVISIT_RULES='[{"pattern": "a", "interval": 0}]'
    )
    assert not p.tracks("http://a.test/") and p.tracks("http://b.test/")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"CRAWLFLEET_REVISIT": "sometimes"}, "CRAWLFLEET_REVISIT must be one of 'off', "),
        ({"CRAWLFLEET_REVISIT_INTERVAL_SECONDS": -1}, "CRAWLFLEET_REVISIT_INTERVAL_SECONDS must"),
        (
            {"CRAWLFLEET_REVISIT_INTERVAL_SECONDS": 60},
            "CRAWLFLEET_REVISIT_INTERVAL_SECONDS (60) must be between "
            "CRAWLFLEET_REVISIT_MIN_SECONDS (3600)",
        ),
        (
            {"CRAWLFLEET_REVISIT_MIN_SECONDS": 10, "CRAWLFLEET_REVISIT_MAX_SECONDS": 5},
            "CRAWLFLEET_REVISIT_MIN_SECONDS (10) must be at most CRAWLFLEET_REVISIT_MAX_SECONDS",
        ),
        ({"CRAWLFLEET_REVISIT_FASTER": 1.5}, "CRAWLFLEET_REVISIT_FASTER must be below 1"),
        ({"CRAWLFLEET_REVISIT_SLOWER": 1}, "CRAWLFLEET_REVISIT_SLOWER must be > 1"),
        ({"CRAWLFLEET_REVISIT_GONE_AFTER": 0}, "CRAWLFLEET_REVISIT_GONE_AFTER must be >= 1"),
        ({"CRAWLFLEET_REVISIT_CONDITIONAL": "maybe"}, "CRAWLFLEET_REVISIT_CONDITIONAL must be"),
        ({"CRAWLFLEET_REVISIT_IGNORE_FIELDS": [1]}, "CRAWLFLEET_REVISIT_IGNORE_FIELDS must be"),
        ({"CRAWLFLEET_REVISIT_RULES": "[{"}, "CRAWLFLEET_REVISIT_RULES must be a list or a JSON"),
        ({"CRAWLFLEET_REVISIT_RULES": {"a": 1}}, "CRAWLFLEET_REVISIT_RULES must be a list"),
        ({"CRAWLFLEET_REVISIT_RULES": ["/a"]}, r"CRAWLFLEET_REVISIT_RULES\[0\] must be a dict"),
        (
            {"CRAWLFLEET_REVISIT_RULES": [{"pattern": "a", "intervall": 5}]},
            r"CRAWLFLEET_REVISIT_RULES\[0\] has unknown key 'intervall'",
        ),
        ({"CRAWLFLEET_REVISIT_RULES": [{}]}, r"CRAWLFLEET_REVISIT_RULES\[0\]\.pattern must be"),
        (
            {"CRAWLFLEET_REVISIT_RULES": [{"pattern": "a"}, {"pattern": "(b"}]},
            r"CRAWLFLEET_REVISIT_RULES\[1\]\.pattern is not a regular expression",
        ),
        (
            {"CRAWLFLEET_REVISIT_RULES": [{"pattern": "a", "policy": "often"}]},
            r"CRAWLFLEET_REVISIT_RULES\[0\]\.policy must be one of",
        ),
        (
            {"CRAWLFLEET_REVISIT_RULES": [{"pattern": "a", "interval": "1h"}]},
            r"CRAWLFLEET_REVISIT_RULES\[0\]\.interval must be a number of seconds",
        ),
        (
            {"CRAWLFLEET_REVISIT_RULES": [{"pattern": "a", "interval": 60}]},
            r"CRAWLFLEET_REVISIT_RULES\[0\]\.interval \(60\) must be between "
            r"CRAWLFLEET_REVISIT_RULES\[0\]\.min \(3600\)",
        ),
    ],
)
def test_wrong_values_are_refused_naming_the_setting(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message if "\\" in message else re.escape(message)):
        check(settings_with_defaults(values))


def test_the_addon_loads_the_revisit_middlewares_only_when_revisits_are_on() -> None:
    from scrapy.settings import Settings

    from crawlfleet.addon import CHANGES, GONE_MARKS, REVISITS, Addon

    off = Settings()
    Addon().update_settings(off)
    assert REVISITS not in off.getwithbase("DOWNLOADER_MIDDLEWARES")
    assert CHANGES not in off.getwithbase("SPIDER_MIDDLEWARES")
    assert GONE_MARKS not in off.getwithbase("DOWNLOADER_MIDDLEWARES")
    on = Settings()
    on.set("CRAWLFLEET_REVISIT", "adaptive", priority="spider")
    Addon().update_settings(on)
    assert on.getwithbase("DOWNLOADER_MIDDLEWARES")[REVISITS] == 545
    assert on.getwithbase("SPIDER_MIDDLEWARES")[CHANGES] == 880
    assert on.getwithbase("DOWNLOADER_MIDDLEWARES")[GONE_MARKS] == 544
    wrong = Settings()
    wrong.set("CRAWLFLEET_REVISIT_RULES", [{"pattern": "("}], priority="project")
    with pytest.raises(ConfigError, match=r"CRAWLFLEET_REVISIT_RULES\[0\]\.pattern"):
        Addon().update_settings(wrong)


def test_a_spec_file_carries_its_revisit_rules(tmp_path: Any) -> None:
    from scrapy.settings import Settings

    from crawlfleet.addon import REVISITS, Addon
    from crawlfleet.spiders import SpecSpider
    from tests.support.specs import write_spec

    path = write_spec(
        tmp_path,
        """
        name: watch
        start_urls: ["http://a.test/"]
        start_item: page
        items:
          page:
            fields:
              title: {css: "h1::text"}
        settings:
          CRAWLFLEET_REVISIT: adaptive
          CRAWLFLEET_REVISIT_IGNORE_FIELDS: [seen]
          CRAWLFLEET_REVISIT_RULES:
            - {pattern: "/list", interval: 3600, min: 600, max: 86400}
            - {pattern: "\\\\.pdf$", policy: "off"}
        """,
    )
    spider = SpecSpider.from_spec(path)
    settings = Settings()
    settings.setdict(dict(spider.custom_settings or {}), priority="spider")
    Addon().update_settings(settings)
    assert REVISITS in settings.getwithbase("DOWNLOADER_MIDDLEWARES")
    p = revisit_policy(settings)
    assert p.rule_for("http://a.test/list").max_seconds == 86400
    assert not p.tracks("http://a.test/a.pdf") and p.ignore_fields == {"seen"}
