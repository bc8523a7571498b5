"""``crawlfleet bundle``: one file that runs a node with a bare Python, configured by a
TOML file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipapp
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.config import validate_job_name
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


def other_patch_python() -> str | None:
    """A Python of this minor version but another patch release (Debian's python3.X when
    the tests run on a pyenv or python.org build: ./dev.sh test installs it), or None."""
    minor = "{}.{}".format(*sys.version_info[:2])
    candidates = [f"/usr/bin/python{minor}", f"/usr/local/bin/python{minor}"]
    candidates += [p for p in (shutil.which(f"python{minor}"), shutil.which("python3")) if p]
    for path in dict.fromkeys(candidates):
        if not os.access(path, os.X_OK):
            continue
        probe = subprocess.run(
            [path, "-S", "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        version = tuple(int(v) for v in probe.stdout.split() or ["0"])
        if version[:2] == sys.version_info[:2] and version != sys.version_info[:3]:
            return path
    return None


def patch_of(python: str) -> int:
    probe = [python, "-S", "-c", "import sys; print(sys.version_info.micro)"]
    return int(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)


def python_id(python: str) -> str:
    return "this-python" if python == BARE_PYTHON else "other-patch-release"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A bundle of this installation (built once: half a minute), and its manifest."""
    pyz = tmp_path_factory.mktemp("bundle") / "crawlfleet-node.pyz"
    r = cli("bundle", "-o", str(pyz))
    assert r.returncode == 0, r.stderr
    print(f"\n{r.stderr.strip()}")
    with zipfile.ZipFile(pyz) as zf:
        manifest = json.loads(zf.read("bundle.json"))
    return pyz, manifest


OTHER_PYTHON = other_patch_python()
NO_OTHER_PYTHON = (
    f"no Python {sys.version_info[0]}.{sys.version_info[1]} of another patch release here "
    "(./dev.sh test installs Debian's where apt-get may be used)"
)


@pytest.mark.slow
@pytest.mark.parametrize("python", [BARE_PYTHON, OTHER_PYTHON or ""], ids=python_id)
def test_a_bundle_runs_a_node_with_nothing_else_installed(
    tmp_path: Path,
    redis_server_url: str,
    node_env: dict[str, str],
    bundle: tuple[Path, dict[str, Any]],
    python: str,
) -> None:
    if not python:
        pytest.skip(NO_OTHER_PYTHON)
    pyz, manifest = bundle
    assert manifest["python"] == list(sys.version_info[:2])
    assert any(d.startswith("Scrapy==") for d in manifest["distributions"])
    config = tmp_path / "node.toml"
    lines = [f'CRAWLFLEET_REDIS_URL = "{redis_server_url}"', 'CRAWLFLEET_ITEM_STAGES = ""']
    lines += [f'{name} = "{value}"' for name, value in node_env.items()]
    config.write_text("\n".join(lines) + "\n")
    workdir = tmp_path / "node"
    workdir.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    patch = patch_of(python)
    lacking = [m for m in manifest.get("missing", []) if patch in m["patches"]]
    with TestSite(SiteModel(pages=30, hosts=2, problems=False)) as site:
        seeds = "start_urls=" + ",".join(site.seed_urls)
        spider = "crawlfleet.testsite.spider:TestSiteSpider"
        crawl = ["crawl", spider, "--job", "bundled", "-a", seeds, "--config", str(config)]
        node = subprocess.run(
            [python, "-S", str(pyz), *crawl],  # -S: not even the interpreter's packages
            capture_output=True,
            text=True,
            timeout=300,
            cwd=workdir,
            env=env,
        )
        stats = site.stats()
    if lacking:  # not downloadable where it was built: a refusal, in one line
        print(f"the bundle lacks {lacking}: checking its refusal")
        assert node.returncode == 2
        (line,) = node.stderr.strip().splitlines()
        assert line.startswith("crawlfleet bundle: error: crawlfleet-node.pyz lacks ")
        return
    assert node.returncode == 0, node.stderr[-3000:]
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    # -S and a bare environment: Scrapy could only come from the bundle's extraction
    extracted = list((tmp_path / "c" / "crawlfleet" / "bundles").iterdir())
    assert [p.name for p in extracted] == [manifest["id"]]


def test_requirements_of_other_patch_releases_are_followed() -> None:
    from crawlfleet.bundle.builder import PATCH_RELEASES, needed_on, resolve

    major, minor, here = sys.version_info[:3]
    below = Marker(f'python_full_version < "{major}.{minor}.{here + 1}"')
    assert needed_on(below) == tuple(range(here + 1))
    assert needed_on(Marker(f'python_full_version >= "{major}.{minor}.{here + 1}"')) == tuple(
        range(here + 1, len(PATCH_RELEASES))
    )
    assert needed_on(Marker(f'python_version < "{major}.{minor}"')) == ()
    assert needed_on(Marker('sys_platform == "no-such-platform"')) == ()
    assert needed_on(Marker('extra == "test"')) == ()
    assert needed_on(Marker('extra == "test"'), "test") == tuple(PATCH_RELEASES)
    # what this installation's tree needs on other patch releases and lacks here
    resolved = resolve()
    for each in resolved.missing:
        assert here not in each.patches and each.patches
    redis = next(d for d in resolved.distributions if d.metadata["Name"] == "redis")
    conditional = [
        Requirement(r)
        for r in redis.requires or []
        if "python_full_version" in r
        and "extra" not in r
        and here not in needed_on(Requirement(r).marker)
    ]
    for req in conditional:  # redis-py's async-timeout below 3.11.3 (on 3.11.3+)
        names = [m.requirement for m in resolved.missing]
        names += [d.metadata["Name"] for d in resolved.distributions]
        assert any(n.startswith(req.name) for n in names), (req, names)


@pytest.mark.parametrize("python", [BARE_PYTHON, OTHER_PYTHON or ""], ids=python_id)
def test_a_bundle_refuses_a_patch_release_it_lacks_a_requirement_for(
    tmp_path: Path, python: str
) -> None:
    """The bootstrap's refusal, on a Python whose patch release the manifest says needs
    what the bundle lacks (what a bundle built with --no-download says on 3.11.0-3.11.2)."""
    from crawlfleet.bundle import bootstrap

    if not python:
        pytest.skip(NO_OTHER_PYTHON)
    minor = sys.version_info[1]
    patch = patch_of(python)
    marker = f'python_full_version < "3.{minor}.{patch + 1}"'
    missing: dict[str, object] = {"requirement": "async-timeout>=4.0.3", "marker": marker}
    missing["patches"] = list(range(patch + 1))
    manifest = {
        "id": "test",
        "python": list(sys.version_info[:2]),
        "platform": sysconfig.get_platform(),
        "missing": [missing],
    }
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "bundle.json").write_text(json.dumps(manifest))
    shutil.copy(bootstrap.__file__, staging / "__main__.py")
    pyz = tmp_path / "node.pyz"
    zipapp.create_archive(staging, pyz)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    r = subprocess.run(
        [python, "-S", str(pyz), "status"], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line == (
        f"crawlfleet bundle: error: node.pyz lacks async-timeout>=4.0.3 ({marker}), which "
        f"Python 3.{minor}.{patch} needs: build it again where pip can download that, or "
        "pip install 'async-timeout>=4.0.3' there first; or run it with Python "
        f"3.{minor}.{patch + 1} or later"
    )
    assert not (tmp_path / "c").exists()  # refused before unpacking anything


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


def test_the_checkouts_lock_is_what_a_bundle_downloads(tmp_path: Path) -> None:
    from crawlfleet.bundle.builder import LOCK, locked

    assert Path(__file__).resolve().parents[2] / "requirements" / "test.lock" == LOCK
    pins = locked()
    assert "scrapy" in pins and "w3lib" in pins and "crawlfleet" not in pins
    for name, (version, hashes) in pins.items():
        assert version and hashes, name  # every pin has its files' hashes
        assert all(h.startswith("sha256:") and len(h) == 71 for h in hashes), name
    lock = tmp_path / "x.lock"
    lock.write_text(
        "# comment\nfoo-bar==1.2 ; python_version < '3.13' \\\n"
        f"    --hash=sha256:{'a' * 64} \\\n    --hash=sha256:{'b' * 64}\n    # via x\n"
        f"baz==3 \\\n    --hash=sha256:{'c' * 64}\n"
    )
    assert locked(lock) == {
        "foo-bar": ("1.2", (f"sha256:{'a' * 64}", f"sha256:{'b' * 64}")),
        "baz": ("3", (f"sha256:{'c' * 64}",)),
    }
    assert locked(tmp_path / "none.lock") == {}
