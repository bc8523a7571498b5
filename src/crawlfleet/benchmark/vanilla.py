"""Run a spider with plain Scrapy (memory scheduler, no crawlfleet): the baseline.

``python -m crawlfleet.benchmark.vanilla module:Class -a NAME=VALUE -s NAME=VALUE``
"""

from __future__ import annotations

import argparse
import sys

from scrapy.crawler import CrawlerProcess
from scrapy.settings import Settings
from scrapy.utils.misc import load_object


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crawlfleet.benchmark.vanilla")
    parser.add_argument("spider")
    parser.add_argument("-a", dest="args", action="append", default=[])
    parser.add_argument("-s", dest="settings", action="append", default=[])
    ns = parser.parse_args(argv)
    settings = Settings()
    for item in ns.settings:
        name, _, value = item.partition("=")
        settings.set(name, value, priority="cmdline")
    module, _, name = ns.spider.partition(":")
    spidercls = load_object(f"{module}.{name}")
    process = CrawlerProcess(settings)
    process.crawl(spidercls, **dict(a.split("=", 1) for a in ns.args))
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
