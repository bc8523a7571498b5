"""``crawlfleet bundle``: one file that runs a node with a bare Python, configured by a
TOML file."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

ROOT = Path(__file__).resolve().parents[2]
#: The interpreter the test venv was made from: nothing of the venv on its path.
BARE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


@pytest.mark.slow
def test_a_bundle_runs_a_node_with_nothing_else_installed(
    tmp_path: Path, redis_server_url: str, node_env: dict[str, str]
) -> None:
    pyz = tmp_path / "crawlfleet-node.pyz"
    r = cli("bundle", "-o", str(pyz))
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(pyz) as zf:
        manifest = json.loads(zf.read("bundle.json"))
    assert manifest["python"] == list(sys.version_info[:2])
    assert any(d.startswith("Scrapy==") for d in manifest["distributions"])
    config = tmp_path / "node.toml"
    lines = [f'CRAWLFLEET_REDIS_URL = "{redis_server_url}"', 'CRAWLFLEET_ITEM_STAGES = ""']
    lines += [f'{name} = "{value}"' for name, value in node_env.items()]
    config.write_text("\n".join(lines) + "\n")
    workdir = tmp_path / "node"
    workdir.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    with TestSite(SiteModel(pages=30, hosts=2, problems=False)) as site:
        seeds = "start_urls=" + ",".join(site.seed_urls)
        spider = "crawlfleet.testsite.spider:TestSiteSpider"
        crawl = ["crawl", spider, "--job", "bundled", "-a", seeds, "--config", str(config)]
        node = subprocess.run(
            [BARE_PYTHON, "-S", str(pyz), *crawl],  # -S: not even the interpreter's packages
            capture_output=True,
            text=True,
            timeout=300,
            cwd=workdir,
            env=env,
        )
        stats = site.stats()
    assert node.returncode == 0, node.stderr[-3000:]
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    # -S and a bare environment: Scrapy could only come from the bundle's extraction
    extracted = list((tmp_path / "c" / "crawlfleet" / "bundles").iterdir())
    assert [p.name for p in extracted] == [manifest["id"]]
