"""Real Scrapyd servers (the PyPI package) on loopback for the tests that drive them,
and a small Scrapy project with the add-on to deploy on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.waiting import wait_until

__all__ = ["PASSWORD", "Scrapyd", "make_project"]

#: The password of the Scrapyd servers started with ``auth`` (user ``cf``).
PASSWORD = "s3cret-scrapyd"


@dataclass
class Scrapyd:
    """A Scrapyd server of its own in *folder* on 127.0.0.1:*port*, with basic auth
    (``cf``, :data:`PASSWORD`) when *auth*; :meth:`start` returns once it answers."""

    folder: Path
    port: int
    auth: bool
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        auth = f"username = cf\npassword = {PASSWORD}\n" if self.auth else ""
        (self.folder / "scrapyd.conf").write_text(
            "[scrapyd]\nbind_address = 127.0.0.1\n"
            f"http_port = {self.port}\npoll_interval = 0.5\nmax_proc = 4\n"
            "eggs_dir = eggs\nlogs_dir = logs\ndbs_dir = dbs\nitems_dir =\n" + auth
        )
        log = (self.folder / "scrapyd.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scrapyd"],
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its crawl processes too, for kill()
        )
        auth_pair = ("cf", PASSWORD) if self.auth else None

        def up() -> bool:
            try:
                return httpx.get(f"{self.url}/daemonstatus.json", auth=auth_pair).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(f"Scrapyd on {self.port}", up, timeout=30)

    def kill(self) -> None:
        """Kill it and every process it started (a machine that went down)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def make_project(root: Path) -> Path:
    """A Scrapy project with one spider (the bundled test site's) and the add-on."""
    (root / "fleetproj" / "spiders").mkdir(parents=True)
    (root / "scrapy.cfg").write_text(
        "[settings]\ndefault = fleetproj.settings\n\n[deploy]\nproject = fleetproj\n"
    )
    (root / "fleetproj" / "__init__.py").write_text("")
    (root / "fleetproj" / "spiders" / "__init__.py").write_text("")
    (root / "fleetproj" / "settings.py").write_text(
        textwrap.dedent(
            """\
            BOT_NAME = "fleetproj"
            SPIDER_MODULES = ["fleetproj.spiders"]
            ADDONS = {"crawlfleet.Addon": 100}
            CONCURRENT_REQUESTS = 4
            CRAWLFLEET_HEARTBEAT_SECONDS = 0.3
            CRAWLFLEET_FINISH_GRACE_SECONDS = 1
            """
        )
    )
    (root / "fleetproj" / "spiders" / "site.py").write_text(
        "from crawlfleet.testsite.spider import TestSiteSpider\n\n\n"
        "class SiteSpider(TestSiteSpider):\n    name = 'site'\n"
    )
    return root
