"""``crawlfleet bundle``: one file that runs a node with a bare Python, configured by a
TOML file."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import validate_job_name
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


def test_a_project_brings_its_scrapy_cfg_and_settings_package_only(tmp_path: Path) -> None:
    from crawlfleet.bundle.builder import _project

    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = books.settings\n")
    (tmp_path / "books" / "spiders").mkdir(parents=True)
    for name in ("books/__init__.py", "books/settings.py", "books/spiders/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "books" / ".env").write_text("SECRET=1\n")
    (tmp_path / "node.toml").write_text('CRAWLFLEET_REDIS_URL = "redis://:pw@h/0"\n')
    (tmp_path / "crawlfleet-node.pyz").write_bytes(b"an earlier bundle")
    module, files = _project(tmp_path)
    assert module == "books.settings"
    assert sorted(rel for _, rel in files) == [
        "books/__init__.py",
        "books/settings.py",
        "books/spiders/__init__.py",
        "scrapy.cfg",
    ]
    (tmp_path / "scrapy.cfg").write_text("[deploy]\nurl = http://localhost:6800/\n")
    with pytest.raises(ConfigError, match=r"no \[settings\] default"):
        _project(tmp_path)


def test_the_fleets_own_tags_are_not_job_names() -> None:
    for name in ("polite", "proxies"):
        with pytest.raises(ConfigError, match="reserved"):
            validate_job_name(name)
    assert validate_job_name("polite-news") == "polite-news"
