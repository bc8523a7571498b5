"""crawlfleet: a distributed web crawler built on Scrapy and Redis.

Enable it in a Scrapy project with one add-on::

    ADDONS = {"crawlfleet.Addon": 100}
"""

from __future__ import annotations

from crawlfleet.addon import Addon

__all__ = ["Addon", "__version__"]
__version__ = "0.1.0"
