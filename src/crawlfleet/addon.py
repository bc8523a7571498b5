"""The crawlfleet Scrapy add-on: ``ADDONS = {"crawlfleet.Addon": 100}``.

It installs crawlfleet's defaults and components at the ``addon`` priority, so that the
project's own settings, a spider's ``custom_settings`` and ``-s`` options still win.
"""

from __future__ import annotations

import os

from scrapy.settings import BaseSettings

from crawlfleet.settings import default_settings

__all__ = ["Addon"]

SCHEDULER = "crawlfleet.frontier.scheduler.Scheduler"
STATS_FILE = "crawlfleet.node.statsfile.StatsFile"


class Addon:
    """Turns a Scrapy project into a crawlfleet node."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings.setmodule(default_settings, priority="addon")
        env_url = os.environ.get("CRAWLFLEET_REDIS_URL")
        if env_url:
            # the environment beats settings files (deployment), not -s on the command line
            settings.set("CRAWLFLEET_REDIS_URL", env_url, priority=25)
        settings.set("SCHEDULER", SCHEDULER, priority="addon")
        # component dicts are merged, as Scrapy's add-on docs show: the project's own
        # entries (including None to disable one of ours) are kept
        if STATS_FILE not in settings["EXTENSIONS"]:
            settings["EXTENSIONS"][STATS_FILE] = 900
