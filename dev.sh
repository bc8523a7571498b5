#!/usr/bin/env bash
# crawlfleet's two commands, on a fresh Debian/Ubuntu machine with Python 3.11+:
#   ./dev.sh demo   run the demo crawl (embedded Redis, bundled site, 3 nodes)
#   ./dev.sh test   run the whole test suite
# Both create .venv/ and install crawlfleet into it first (once): the demo what it
# needs, the tests their extras too (pytest, Scrapyd, scrapy-redis, Playwright, ...),
# at the versions the lock pins (requirements/demo.lock, requirements/test.lock), every
# file checked against its hash. And for maintainers (docs/operations.md, Dependencies):
#   ./dev.sh test --latest   the suite on the newest release of every dependency, in a
#                            throwaway virtualenv (.venv-latest), the lock left alone
#   ./dev.sh lock            the lock refreshed to the newest releases (uv pip compile)
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=.venv
# uv, the tool that writes the lock (./dev.sh lock only): this release, in .venv-tools
UV_VERSION=0.13.10

PIP=(-m pip --quiet --disable-pip-version-check)

# make_venv DIR: a virtualenv in DIR (kept if there is one).
make_venv() {
    local dir="$1"
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "crawlfleet needs Python 3.11 or newer as '$PYTHON' (set PYTHON=...)" >&2
        exit 2
    fi
    if [ ! -x "$dir/bin/python" ]; then
        echo "creating the virtualenv $dir" >&2
        if ! "$PYTHON" -m venv "$dir"; then
            rm -rf "$dir"
            echo "could not create a virtualenv: on Debian/Ubuntu, apt-get install python3-venv" >&2
            exit 2
        fi
    fi
}

# bootstrap [EXTRAS]: the virtualenv, and crawlfleet in it with EXTRAS ("test"), every
# dependency at the version its lock pins (requirements/demo.lock, requirements/test.lock).
bootstrap() {
    local extras="${1:-}"
    make_venv "$VENV"
    local stamp="$VENV/.installed${extras:+-$extras}" lock="requirements/${extras:-demo}.lock"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
        if [ -n "$extras" ]; then
            echo "installing crawlfleet with its $extras extras into $VENV (Scrapy, Redis, the manager; $extras tools: pytest, Scrapyd, scrapy-redis, Playwright) as $lock pins them: a few minutes the first time" >&2
        else
            echo "installing crawlfleet into $VENV (Scrapy, Redis, the manager and their dependencies) as $lock pins them: a few minutes the first time" >&2
        fi
        # the lock's packages, each file checked against its hash; then crawlfleet itself,
        # built with the setuptools the lock pins (no download, no other version)
        "$VENV/bin/python" "${PIP[@]}" install --require-hashes --no-deps -r "$lock"
        "$VENV/bin/python" "${PIP[@]}" install --no-deps --no-build-isolation -e .
        if ! problems="$("$VENV/bin/python" -m pip check 2>&1)"; then
            echo "$lock does not hold what pyproject.toml asks for (run ./dev.sh lock):" >&2
            echo "$problems" >&2
            exit 2
        fi
        # byte-compiled once here, not by every node of the first crawl at once (four
        # nodes compiling together sent their first request 5.6 s after launch, not 2.8)
        "$VENV/bin/python" -m compileall -q -j 0 src > /dev/null
        touch "$stamp"
    fi
}

# latest_venv: .venv-latest made anew, crawlfleet and its test extras in it at the newest
# release of everything (the lock not read); says which differ from the lock.
latest_venv() {
    local dir=.venv-latest
    rm -rf "$dir"
    make_venv "$dir"
    echo "installing the newest release of every dependency into $dir (the lock is not read)" >&2
    "$dir/bin/python" "${PIP[@]}" install --upgrade pip setuptools
    "$dir/bin/python" "${PIP[@]}" install --upgrade -e ".[test]"
    "$dir/bin/python" - requirements/test.lock <<'PY' >&2
import re, sys
from importlib.metadata import distributions
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", open(sys.argv[1]).read(), re.M))
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
pins = {norm(name): version for name, version in pins.items()}
newer = sorted(
    f"{dist.metadata['Name']} {dist.version} (lock: {pins[norm(dist.metadata['Name'])]})"
    for dist in distributions()
    if norm(dist.metadata["Name"]) in pins and pins[norm(dist.metadata["Name"])] != dist.version
)
print("not as the lock pins them: " + (", ".join(newer) if newer else "none"))
PY
}

# run_suite VENV [pytest options]: the whole suite with VENV's Python, in two passes.
run_suite() {
    local venv="$1"
    shift
    # Two passes. Most tests wait (on servers, nodes, browsers), so the first runs
    # them in CRAWLFLEET_TEST_WORKERS processes (4), a file's tests in one of them;
    # the tests marked "timing" measure rates and send times, so the second runs
    # them alone, on a machine the first pass no longer loads.
    set +e
    CRAWLFLEET_TEST_PASS=parallel "$venv/bin/python" -m pytest \
        -n "${CRAWLFLEET_TEST_WORKERS:-4}" --dist loadfile "$@"
    parallel=$?
    CRAWLFLEET_TEST_PASS=timing "$venv/bin/python" -m pytest "$@"
    timing=$?
    set -e
    echo "parallel pass: exit $parallel; timing pass: exit $timing" >&2
    if [ "$parallel" -eq 5 ] && [ "$timing" -eq 5 ]; then
        echo "pytest collected no tests: failing on purpose" >&2
        exit 1
    fi
    for status in "$parallel" "$timing"; do
        if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
            exit "$status"
        fi
    done
    exit 0
}

# lock [uv pip compile options]: requirements/test.lock and demo.lock written anew by uv
# (universal: every platform and Python >= 3.11; hashes of every file). No options:
# every package at its newest release (--upgrade); else the options as given, e.g.
# --upgrade-package w3lib.
lock() {
    local tools=.venv-tools
    make_venv "$tools"
    if [ "$("$tools/bin/python" -m uv --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
        "$tools/bin/python" "${PIP[@]}" install "uv==$UV_VERSION"
    fi
    local options=("$@")
    if [ "${#options[@]}" -eq 0 ]; then
        options=(--upgrade)
    fi
    local compile=("$tools/bin/python" -m uv pip compile --quiet --universal --generate-hashes
        --python-version 3.11 --custom-compile-command "./dev.sh lock")
    mkdir -p requirements
    "${compile[@]}" "${options[@]}" pyproject.toml --extra test -o requirements/test.lock
    # the demo's lock within the test lock: one .venv serves both
    "${compile[@]}" pyproject.toml -c requirements/test.lock -o requirements/demo.lock
    echo "requirements/test.lock: $(grep -cE '^[A-Za-z0-9]' requirements/test.lock) packages; requirements/demo.lock: $(grep -cE '^[A-Za-z0-9]' requirements/demo.lock) (git diff requirements/ shows what changed)" >&2
}

# apt-get install PACKAGE, saying WHAT it is for: when apt-get may be used (root, or sudo
# without a password); otherwise the tests that need it are skipped, saying why.
# CRAWLFLEET_NO_APT=1: never.
apt_install() {
    local package="$1" what="$2"
    if [ "${CRAWLFLEET_NO_APT:-}" = 1 ]; then
        return
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "no apt-get here: $what will be skipped (no $package)" >&2
        return
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            echo "$package is missing and apt-get needs root: $what will be skipped (apt-get install $package)" >&2
            return
        fi
    fi
    echo "installing Debian's $package for $what (CRAWLFLEET_NO_APT=1 skips this)" >&2
    local install=($sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package")
    if ! "${install[@]}" >/dev/null 2>&1; then
        $sudo apt-get update -q >/dev/null 2>&1 || true
        if ! "${install[@]}" >/dev/null 2>&1; then
            echo "could not install $package with apt-get: $what will be skipped" >&2
        fi
    fi
}

# The dashboard's browser tests drive Debian's chromium (never a downloaded browser).
ensure_chromium() {
    if [ -x /usr/bin/chromium ] || [ -n "${CRAWLFLEET_CHROMIUM:-}" ]; then
        return
    fi
    apt_install chromium "the dashboard's browser tests"
}

# The one-file node's test runs it on another patch release of the venv's Python minor
# version: Debian's, when the venv's Python is another build (pyenv, python.org).
ensure_debian_python() {
    local minor
    minor="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    if [ -x "/usr/bin/python$minor" ] || ! command -v apt-cache >/dev/null 2>&1; then
        return
    fi
    if apt-cache policy "python$minor" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt_install "python$minor" "the bundle's test on another patch release of Python"
    fi
}

case "${1:-}" in
    demo)
        shift
        bootstrap
        exec "$VENV/bin/crawlfleet" demo "$@"
        ;;
    test)
        shift
        if [ "${1:-}" = --latest ]; then
            shift
            latest_venv
            ensure_chromium
            run_suite .venv-latest "$@"
        fi
        bootstrap test
        ensure_chromium
        ensure_debian_python
        run_suite "$VENV" "$@"
        ;;
    lock)
        shift
        lock "$@"
        ;;
    *)
        echo "usage: ./dev.sh demo [options] | ./dev.sh test [--latest] [pytest options] | ./dev.sh lock [uv pip compile options]" >&2
        exit 2
        ;;
esac
