"""Build a crawlfleet bundle: one zipapp file holding crawlfleet, every package it
needs as installed here (native extensions included), and optionally a Scrapy
project. It runs with a Python of the same minor version (any patch release) and
platform as this one, with nothing else installed (see
:mod:`crawlfleet.bundle.bootstrap`)."""

from __future__ import annotations

import compileall
import configparser
import hashlib
import importlib.metadata as metadata
import json
import logging
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipapp
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import crawlfleet
from crawlfleet.bundle import bootstrap
from crawlfleet.exceptions import ConfigError

__all__ = [
    "PATCH_RELEASES",
    "Bundle",
    "Missing",
    "Resolved",
    "build_bundle",
    "needed_on",
    "resolve",
]

logger = logging.getLogger(__name__)

#: Files of an installation that a bundle leaves out: an editable install's hooks (the
#: package itself is copied from its sources), path hooks (.pth: the bundle's packages
#: are put on sys.path by its bootstrap) and compiled bytecode (compiled anew).
_SKIPPED_SUFFIXES = (".pyc", ".pth")
_SKIPPED_PREFIXES = ("__editable__",)


#: Patch releases of the bundle's Python minor version whose requirements it follows
#: (markers such as ``python_full_version < "3.11.3"``).
PATCH_RELEASES = bootstrap.PATCH_RELEASES


@dataclass(frozen=True)
class Missing:
    """A requirement that some patch releases of this Python minor version need, that is
    not installed here and could not be downloaded: the bundle refuses to start there."""

    requirement: str  # name, extras and versions, no marker
    marker: str
    patches: tuple[int, ...]  # the patch releases that need it

    def as_dict(self) -> dict[str, object]:
        return {"requirement": self.requirement, "marker": self.marker, "patches": self.patches}


@dataclass(frozen=True)
class Resolved:
    """What a bundle holds: distributions installed here or downloaded for other patch
    releases (into a directory the caller removes once they are copied), the names and
    versions of those downloaded, and what it lacks."""

    distributions: list[metadata.Distribution]
    downloaded: list[str]
    missing: list[Missing]


@dataclass(frozen=True)
class Bundle:
    path: Path
    id: str
    distributions: list[str]
    size_bytes: int
    settings_module: str | None
    downloaded: list[str]
    missing: list[Missing]


def needed_on(marker: Marker | None, extra: str = "") -> tuple[int, ...]:
    """The patch releases of this Python minor version (PATCH_RELEASES) on which a
    requirement with *marker* applies, everything else as here (platform, extra)."""
    if marker is None:
        return tuple(PATCH_RELEASES)
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env["extra"] = extra
    major, minor = sys.version_info[:2]
    patches = []
    for patch in PATCH_RELEASES:
        full = f"{major}.{minor}.{patch}"
        env["python_full_version"] = full
        if env["implementation_name"] == "cpython":
            env["implementation_version"] = full
        if marker.evaluate(env):
            patches.append(patch)
    return tuple(patches)


#: The lock of a source checkout (``./dev.sh`` installs from it): what a bundle built
#: from that checkout downloads for other patch releases of Python.
LOCK = Path(__file__).resolve().parents[3] / "requirements" / "test.lock"
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


def locked(lock: Path = LOCK) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Name (canonical) -> (version, hashes) of each package *lock* pins; empty when
    there is no lock (crawlfleet installed from a package index, not a checkout)."""
    try:
        text = lock.read_text(encoding="utf-8")
    except OSError:
        return {}
    pins: dict[str, tuple[str, tuple[str, ...]]] = {}
    name = ""
    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin is not None:
            name = canonicalize_name(pin.group(1))
            pins[name] = (pin.group(2), ())
        elif name and line.startswith(" "):
            version, hashes = pins[name]
            pins[name] = (version, hashes + tuple(_HASH.findall(line)))
    return pins


def _download(req: Requirement, into: Path) -> metadata.Distribution | None:
    """*req* (no dependencies: they are followed like any other) installed from the
    package index into a directory of *into* by this Python's pip, as a wheel for this
    Python and platform, at the version and with the hashes the checkout's lock pins
    where it pins one; None if that fails (no pip, no network, no such wheel)."""
    spec = req.name + (f"[{','.join(sorted(req.extras))}]" if req.extras else "")
    pin = locked().get(canonicalize_name(req.name))
    target = into / canonicalize_name(req.name)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command += ["--no-deps", "--only-binary=:all:", "--no-compile", "--retries", "1"]
    command += ["--target", str(target)]
    if pin is not None:
        spec += f"=={pin[0]}"
        pinned = into / f"{canonicalize_name(req.name)}.lock"
        into.mkdir(parents=True, exist_ok=True)
        pinned.write_text(spec + "".join(f" --hash={h}" for h in pin[1]) + "\n")
        command += ["--require-hashes", "-r", str(pinned)]
    else:
        spec += str(req.specifier)
        command.append(spec)
    logger.info("downloading %s (needed on other patch releases of Python)", spec)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("could not download %s: %s", spec, exc)
        return None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        logger.warning("could not download %s: %s", spec, why)
        return None
    for dist in metadata.distributions(path=[str(target)]):
        if canonicalize_name(dist.metadata["Name"]) == canonicalize_name(req.name):
            return dist
    return None


def resolve(root: str = "crawlfleet", *, download_into: Path | None = None) -> Resolved:
    """*root* and every distribution it requires, transitively, as installed here, for
    every patch release of this Python minor version: a requirement whose marker holds
    on any of them is followed (extras too where a requirement names them; a marker
    that holds on none, e.g. another platform's, is left out). One that is not installed
    here but needed only on other patch releases is downloaded into *download_into*
    (None: not), else reported missing; one needed here must be installed."""
    found: dict[str, metadata.Distribution] = {}
    downloaded: list[str] = []
    missing: dict[str, Missing] = {}
    done: set[tuple[str, str]] = set()
    tried: set[str] = set()
    todo: list[tuple[Requirement, str, tuple[int, ...]]] = [
        (Requirement(root), "", tuple(PATCH_RELEASES))
    ]
    here = sys.version_info.micro
    while todo:
        req, extra, patches = todo.pop()
        key = canonicalize_name(req.name)
        if (key, extra) in done:
            continue
        dist = found.get(key) or _installed(req.name)
        if dist is None and here not in patches and download_into is not None:
            if key not in tried:
                tried.add(key)
                dist = _download(req, download_into)
            if dist is not None:
                downloaded.append(f"{dist.metadata['Name']}=={dist.version}")
        if dist is None:
            if here in patches:
                raise ConfigError(
                    f"{req.name} is required but not installed here: install it, then bundle again"
                )
            marker = str(req.marker) if req.marker is not None else ""
            missing.setdefault(key, Missing(str(_bare(req)), marker, patches))
            continue
        done.add((key, extra))
        missing.pop(key, None)
        found[key] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if extra and (sub.marker is None or "extra" not in str(sub.marker)):
                continue  # a base requirement: followed with extra ""
            # needed where its marker holds and its parent is needed
            needs = tuple(p for p in needed_on(sub.marker, extra) if p in patches)
            if not needs:
                continue
            todo.append((sub, "", needs))
            todo += [(sub, e, needs) for e in sub.extras]
    dists = sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))
    return Resolved(
        dists, sorted(downloaded), sorted(missing.values(), key=lambda m: m.requirement)
    )


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _bare(req: Requirement) -> Requirement:
    """*req* without its marker."""
    bare = Requirement(str(req))
    bare.marker = None
    return bare


def _files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(file on disk, its path in site-packages) of an installed distribution."""
    for rel in dist.files or []:
        parts = Path(str(rel)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts:
            continue
        if rel.name.endswith(_SKIPPED_SUFFIXES) or rel.name.startswith(_SKIPPED_PREFIXES):
            continue
        source = Path(str(dist.locate_file(rel)))
        if source.is_file():
            yield source, "/".join(parts)


def _package_sources(module_dir: Path) -> Iterator[tuple[Path, str]]:
    """Every file of the package at *module_dir* (crawlfleet itself, installed editable
    or not: its Lua scripts, dashboard and migrations included)."""
    for source in sorted(module_dir.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            rel = source.relative_to(module_dir.parent)
            yield source, "/".join(rel.parts)


def _project(directory: Path) -> tuple[str, list[tuple[Path, str]]]:
    """(settings module, files) of the Scrapy project in *directory*: its scrapy.cfg and
    the package of its settings module, nothing else (not the bundle being written, not
    a config file with passwords beside it, not a virtualenv)."""
    cfg = directory / "scrapy.cfg"
    parser = configparser.ConfigParser()
    if not parser.read(cfg):
        raise ConfigError(f"--project {directory}: no scrapy.cfg there")
    module = parser.get("settings", "default", fallback="")
    if not module:
        raise ConfigError(f"{cfg}: no [settings] default = <module>")
    package = directory / module.split(".")[0]
    if not (package / "__init__.py").is_file():
        raise ConfigError(f"{cfg}: the settings module {module} is not in a package at {package}")
    files = [(cfg, "scrapy.cfg")]
    for source in sorted(package.rglob("*")):
        rel = source.relative_to(directory)
        hidden = any(p.startswith(".") or p == "__pycache__" for p in rel.parts)
        if source.is_file() and not hidden:
            files.append((source, "/".join(rel.parts)))
    return module, files


def build_bundle(
    output: Path,
    *,
    project: Path | None = None,
    interpreter: str = "/usr/bin/env python3",
    download: bool = True,
) -> Bundle:
    """Write the bundle to *output* (see the module docstring). *project*: a Scrapy
    project directory: its scrapy.cfg and its settings module's package go in.
    *download*: fetch with pip what other patch releases of this Python need and is
    not installed here (see :func:`resolve`); what is still missing is in the
    manifest, and the bundle refuses to start on those patch releases."""
    staging = Path(tempfile.mkdtemp(prefix="crawlfleet-bundle-"))
    digest = hashlib.sha256()
    try:
        resolved = resolve(download_into=staging / "download" if download else None)
        dists = resolved.distributions
        copied: set[str] = set()

        def add(source: Path, target: str) -> None:
            if target in copied:
                return
            copied.add(target)
            dest = staging / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = source.read_bytes()
            dest.write_bytes(data)
            shutil.copymode(source, dest)
            digest.update(target.encode() + b"\0" + data)

        own = Path(crawlfleet.__file__).resolve().parent
        for source, rel in _package_sources(own):
            add(source, f"site/{rel}")
        for dist in dists:
            for source, rel in _files(dist):
                if not rel.startswith("crawlfleet/"):
                    add(source, f"site/{rel}")
        settings_module = None
        if project is not None:
            settings_module, files = _project(project.resolve())
            for source, rel in files:
                add(source, f"project/{rel}")
        # bytecode now, valid whatever the files' times once extracted: a node starts
        # as fast as an installed one, also where it cannot write __pycache__
        compileall.compile_dir(
            str(staging / "site"),
            quiet=2,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        bundle_id = digest.hexdigest()[:16]
        names = [f"{d.metadata['Name']}=={d.version}" for d in dists]
        manifest = {
            "id": bundle_id,
            "python": list(sys.version_info[:2]),
            "platform": sysconfig.get_platform(),
            "crawlfleet": metadata.version("crawlfleet"),
            "distributions": names,
            "missing": [m.as_dict() for m in resolved.missing],
            "settings_module": settings_module,
        }
        (staging / bootstrap.MANIFEST).write_text(json.dumps(manifest, indent=1))
        shutil.copy2(Path(bootstrap.__file__), staging / "__main__.py")
        shutil.rmtree(staging / "download", ignore_errors=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(staging, output, interpreter=interpreter, compressed=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Bundle(
        output,
        bundle_id,
        names,
        output.stat().st_size,
        settings_module,
        resolved.downloaded,
        resolved.missing,
    )
