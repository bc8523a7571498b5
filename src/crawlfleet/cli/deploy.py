"""``crawlfleet deploy --manager URL``: build the egg of the Scrapy project in this folder
and deploy it, through the manager, to every (or the chosen) Scrapyd node.

    cd myproject && CRAWLFLEET_MANAGER_TOKEN=cft_... crawlfleet deploy --manager http://127.0.0.1:7700

The project is scrapy.cfg's: its ``[settings] default`` module goes into the egg's
entry point, and it is deployed under ``[deploy] project`` (default: the settings
module's package), as scrapyd-deploy does. The token (admin) comes from
``CRAWLFLEET_MANAGER_TOKEN`` or ``--token`` (the environment keeps it out of ``ps``).
"""

from __future__ import annotations

import argparse
import configparser
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from scrapy.utils.conf import closest_scrapy_cfg

from crawlfleet.exceptions import CommandFailed, ConfigError

NAME = "deploy"
HELP = "build this Scrapy project's egg and deploy it to Scrapyd nodes through the manager"

TOKEN_ENV = "CRAWLFLEET_MANAGER_TOKEN"
#: The egg's setup when the project has no setup.py (as scrapyd-deploy writes one).
SETUP = """\
from setuptools import find_packages, setup
setup(
    name={project!r},
    version={version!r},
    packages=find_packages(exclude=["tests", "tests.*"]),
    entry_points={{"scrapy": ["settings = {settings}"]}},
    zip_safe=False,
)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manager", required=True, metavar="URL", help="the manager's URL")
    parser.add_argument("--token", help=f"an admin token (default: ${TOKEN_ENV})")
    parser.add_argument("--nodes", default="all", help="'all' or Scrapyd names, comma-separated")
    parser.add_argument("--version", help="the version deployed (default: the time, as a number)")
    parser.add_argument("--project", help="the Scrapyd project (default: scrapy.cfg's)")


def project_of(cfg_path: Path) -> tuple[str, str]:
    """(Scrapyd project, settings module) of a scrapy.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(cfg_path)
    settings = cfg.get("settings", "default", fallback="")
    if not settings:
        raise ConfigError(f"{cfg_path}: no [settings] default = <module>")
    project = cfg.get("deploy", "project", fallback="") or settings.split(".")[0]
    return project, settings


def build_egg(folder: Path, project: str, version: str, settings: str) -> bytes:
    """The egg of the project in *folder* (its setup.py, or one like scrapyd-deploy's)."""
    with tempfile.TemporaryDirectory(prefix="crawlfleet-egg-") as out:
        setup = folder / "setup.py"
        if setup.exists():
            argv = [sys.executable, str(setup)]
        else:
            code = SETUP.format(project=project, version=version, settings=settings)
            argv = [sys.executable, "-c", code]
        # every file setuptools writes goes to the temporary folder, none into the project
        work = Path(out)
        argv += ["egg_info", "--egg-base", out, "build", "--build-base", str(work / "build")]
        argv += ["bdist_egg", "-d", str(work / "dist"), "-b", str(work / "bdist")]
        done = subprocess.run(
            argv, cwd=folder, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
        eggs = list((work / "dist").glob("*.egg"))
        if done.returncode != 0 or not eggs:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no egg made"]
            raise CommandFailed(f"building the egg failed: {last[0]}")
        return eggs[0].read_bytes()


def run(args: argparse.Namespace) -> int:
    console = Console()
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        raise ConfigError(f"an admin token is needed: ${TOKEN_ENV} or --token")
    found = closest_scrapy_cfg()
    if not found:
        raise ConfigError("no scrapy.cfg here or above: run crawlfleet deploy in a Scrapy project")
    cfg = Path(found)
    project, settings = project_of(cfg)
    project = args.project or project
    version = args.version or str(int(time.time()))
    egg = build_egg(cfg.parent, project, version, settings)
    console.print(f"egg of {project} {version}: {len(egg):,} bytes", highlight=False)
    try:
        r = httpx.post(
            f"{args.manager.rstrip('/')}/api/v1/deploy",
            params={"project": project, "version": version, "nodes": args.nodes},
            content=egg,
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/octet-stream",
            },
            timeout=300,
        )
    except httpx.HTTPError as exc:
        raise CommandFailed(
            f"manager at {args.manager} unreachable ({type(exc).__name__})"
        ) from None
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code != 200:
        message = body.get("error", {}).get("message", r.text[:200]) if body else r.text[:200]
        raise CommandFailed(f"the manager refused the deploy ({r.status_code}): {message}")
    failed = 0
    for result in body["results"]:
        if result["ok"]:
            n = result.get("spiders")
            spiders = f"{n} spider{'' if n == 1 else 's'}" if isinstance(n, int) else "deployed"
            console.print(f"{result['scrapyd']}: deployed ({spiders})", highlight=False)
        else:
            failed += 1
            console.print(f"{result['scrapyd']}: FAILED: {result['error']}", highlight=False)
    return 1 if failed else 0
