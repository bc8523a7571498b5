"""The ``__main__.py`` of a crawlfleet bundle (standard library only: nothing else can
be imported before it has run).

It runs with any patch release of the Python minor version that built it: a
requirement that only some patch releases need is in it (see
:func:`crawlfleet.bundle.builder.resolve`), or, if it could not be had, the bundle
refuses to start on those in one line naming it.

On its first run on a machine it extracts the bundle's packages into
``$XDG_CACHE_HOME/crawlfleet/bundles/<bundle id>`` (``~/.cache`` by default), once,
atomically (nodes started together share one extraction); every run then puts them
first on ``sys.path`` (and in ``PYTHONPATH``, for the processes a command starts) and
runs the crawlfleet command line. A bundle made with a Scrapy project also makes that
project the current one (``SCRAPY_SETTINGS_MODULE``, unless set).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Any

MANIFEST = "bundle.json"
#: Every patch release of a Python minor version there may ever be.
PATCH_RELEASES = range(100)


def _fail(message: str) -> None:
    sys.stderr.write(f"crawlfleet bundle: error: {message}\n")
    raise SystemExit(2)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crawlfleet" / "bundles"


def _extract(archive: Path, target: Path) -> None:
    """Extract the bundle's packages into *target* unless a complete copy is there."""
    if (target / ".complete").exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = Path(tempfile.mkdtemp(prefix=".extract-", dir=target.parent))
    try:
        _unpack(archive, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    (work / ".complete").write_text("ok\n")
    try:
        os.rename(work, target)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(work, ignore_errors=True)
        if not (target / ".complete").exists():
            raise


def _unpack(archive: Path, work: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith(("site/", "project/")):
                continue
            if name.startswith("/") or ".." in Path(name).parts:
                _fail(f"{archive}: unsafe path {name!r} inside")
            zf.extract(info, work)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(work / name, mode)


def _refuse_missing(archive: Path, missing: list[dict[str, Any]]) -> None:
    """Stop in one line if this patch release of Python needs a requirement that the
    bundle could not include (see crawlfleet.bundle.builder.resolve)."""
    patch = sys.version_info.micro
    lacking = [m for m in missing if patch in m["patches"]]
    if not lacking:
        return
    major, minor = sys.version_info[:2]
    names = ", ".join(f"{m['requirement']} ({m['marker']})" for m in lacking)
    quoted = " ".join(f"'{m['requirement']}'" for m in lacking)
    last = PATCH_RELEASES[-1]
    fine = [p for p in range(patch + 1, last + 1) if all(p not in m["patches"] for m in lacking)]
    other = ""
    if fine:
        later = " or later" if fine == list(range(fine[0], last + 1)) else ""
        other = f"; or run it with Python {major}.{minor}.{fine[0]}{later}"
    _fail(
        f"{archive.name} lacks {names}, which Python {major}.{minor}.{patch} needs: build "
        f"it again where pip can download that, or pip install {quoted} there first{other}"
    )


def main() -> None:
    archive = Path(__file__).resolve().parent
    try:
        with zipfile.ZipFile(archive) as zf:
            manifest = json.loads(zf.read(MANIFEST))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        _fail(f"{archive} is not a crawlfleet bundle: {exc}")
    built_for = tuple(manifest["python"])
    if sys.version_info[:2] != built_for:
        _fail(
            f"{archive.name} was built for Python {built_for[0]}.{built_for[1]}; this is "
            f"{sys.version_info[0]}.{sys.version_info[1]} ({sys.executable})"
        )
    here = sysconfig.get_platform()
    if manifest.get("platform", here) != here:
        _fail(f"{archive.name} was built for {manifest['platform']}; this machine is {here}")
    _refuse_missing(archive, manifest.get("missing", []))
    home = _cache_root() / manifest["id"]
    try:
        _extract(archive, home)
    except OSError as exc:
        _fail(
            f"cannot unpack into {home}: {exc.strerror or exc} "
            "(set XDG_CACHE_HOME to a writable directory)"
        )
    paths = [str(home / "site")]
    if manifest.get("settings_module"):
        paths.append(str(home / "project"))
        os.environ.setdefault("SCRAPY_SETTINGS_MODULE", manifest["settings_module"])
    before = list(sys.path)
    for path in paths:
        site.addsitedir(path)
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before
    os.environ["PYTHONPATH"] = os.pathsep.join(
        paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    from crawlfleet.cli.main import main as crawlfleet

    sys.argv[0] = archive.name
    raise SystemExit(crawlfleet())


if __name__ == "__main__":
    main()
