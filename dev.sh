#!/usr/bin/env bash
# crawlfleet's two commands, on a fresh Debian/Ubuntu machine with Python 3.11+:
#   ./dev.sh demo   run the demo crawl (embedded Redis, bundled site, 3 nodes)
#   ./dev.sh test   run the whole test suite
# Both create .venv/ and install crawlfleet into it first (once): the demo what it
# needs, the tests their extras too (pytest, Scrapyd, scrapy-redis, Playwright, ...).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=.venv

# bootstrap [EXTRAS]: the virtualenv, and crawlfleet in it with EXTRAS ("test").
bootstrap() {
    local extras="${1:-}"
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "crawlfleet needs Python 3.11 or newer as '$PYTHON' (set PYTHON=...)" >&2
        exit 2
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "creating the virtualenv $VENV (first run)" >&2
        if ! "$PYTHON" -m venv "$VENV"; then
            rm -rf "$VENV"
            echo "could not create a virtualenv: on Debian/Ubuntu, apt-get install python3-venv" >&2
            exit 2
        fi
    fi
    local stamp="$VENV/.installed${extras:+-$extras}" target="."
    if [ -n "$extras" ]; then
        target=".[$extras]"
    fi
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        if [ -n "$extras" ]; then
            echo "installing crawlfleet with its $extras extras into $VENV (Scrapy, Redis, the manager; $extras tools: pytest, Scrapyd, scrapy-redis, Playwright): a few minutes the first time" >&2
        else
            echo "installing crawlfleet into $VENV (Scrapy, Redis, the manager and their dependencies): a few minutes the first time" >&2
        fi
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target"
        # byte-compiled once here, not by every node of the first crawl at once (four
        # nodes compiling together sent their first request 5.6 s after launch, not 2.8)
        "$VENV/bin/python" -m compileall -q -j 0 src > /dev/null
        touch "$stamp"
    fi
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
        bootstrap test
        ensure_chromium
        ensure_debian_python
        # Two passes. Most tests wait (on servers, nodes, browsers), so the first runs
        # them in CRAWLFLEET_TEST_WORKERS processes (4), a file's tests in one of them;
        # the tests marked "timing" measure rates and send times, so the second runs
        # them alone, on a machine the first pass no longer loads.
        set +e
        CRAWLFLEET_TEST_PASS=parallel "$VENV/bin/python" -m pytest \
            -n "${CRAWLFLEET_TEST_WORKERS:-4}" --dist loadfile "$@"
        parallel=$?
        CRAWLFLEET_TEST_PASS=timing "$VENV/bin/python" -m pytest "$@"
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
        ;;
    *)
        echo "usage: ./dev.sh demo [options] | ./dev.sh test [pytest options]" >&2
        exit 2
        ;;
esac
