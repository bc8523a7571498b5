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

case "${1:-}" in
    demo)
        shift
        bootstrap
        exec "$VENV/bin/crawlfleet" demo "$@"
        ;;
    test)
        shift
        bootstrap
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
