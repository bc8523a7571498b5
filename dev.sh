#!/usr/bin/env bash
# crawlfleet's two commands, on a fresh Debian/Ubuntu machine with Python 3.11+:
#   ./dev.sh demo   run the demo crawl (embedded Redis, bundled site, 3 nodes)
#   ./dev.sh test   run the whole test suite
# Both create .venv/ and install crawlfleet into it first (once).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=.venv

bootstrap() {
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "crawlfleet needs Python 3.11 or newer as '$PYTHON' (set PYTHON=...)" >&2
        exit 2
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        if ! "$PYTHON" -m venv "$VENV"; then
            rm -rf "$VENV"
            echo "could not create a virtualenv: on Debian/Ubuntu, apt-get install python3-venv" >&2
            exit 2
        fi
    fi
    local stamp="$VENV/.installed"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
        touch "$stamp"
    fi
}

# The dashboard's browser tests drive Debian's chromium (never a downloaded browser).
# Installed here when missing and apt-get may be used (root, or sudo without a
# password); otherwise those tests are skipped, saying why. CRAWLFLEET_NO_APT=1: never.
ensure_chromium() {
    if [ -x /usr/bin/chromium ] || [ -n "${CRAWLFLEET_CHROMIUM:-}" ] || [ "${CRAWLFLEET_NO_APT:-}" = 1 ]; then
        return
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "no apt-get here: the dashboard's browser tests will be skipped (no chromium)" >&2
        return
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            echo "chromium is missing and apt-get needs root: the dashboard's browser tests will be skipped (apt-get install chromium)" >&2
            return
        fi
    fi
    echo "installing Debian's chromium for the dashboard's browser tests (CRAWLFLEET_NO_APT=1 skips this)" >&2
    local install=($sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
    if ! "${install[@]}" >/dev/null 2>&1; then
        $sudo apt-get update -q >/dev/null 2>&1 || true
        if ! "${install[@]}" >/dev/null 2>&1; then
            echo "could not install chromium with apt-get: the dashboard's browser tests will be skipped" >&2
        fi
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
        bootstrap
        ensure_chromium
        set +e
        "$VENV/bin/python" -m pytest "$@"
        status=$?
        set -e
        if [ "$status" -eq 5 ]; then
            echo "pytest collected no tests: failing on purpose" >&2
            exit 1
        fi
        exit "$status"
        ;;
    *)
        echo "usage: ./dev.sh demo [options] | ./dev.sh test [pytest options]" >&2
        exit 2
        ;;
esac
