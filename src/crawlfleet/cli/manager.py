"""``crawlfleet manager serve|token|key``: the manager service, its API tokens and the
key that seals the secrets of its state DB.

    crawlfleet manager serve [--host 127.0.0.1] [--port 7700] [--db URL]
    crawlfleet manager token create NAME --role viewer|operator|admin   (token: last line)
    crawlfleet manager token list [--all]
    crawlfleet manager token revoke NAME
    crawlfleet manager key new        (a key for CRAWLFLEET_SECRET_KEY)
    crawlfleet manager key rotate     (every secret of the state DB sealed with a new key)

Every one takes ``--db URL`` (default: ``CRAWLFLEET_STATE_DB_URL``, the setting or the
environment variable; else SQLite under ``CRAWLFLEET_DATA_DIR``) and brings the state
DB's schema up to date first.
"""

from __future__ import annotations

import argparse
import gc
import logging

from rich.console import Console
from rich.table import Table
from scrapy.settings import Settings

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    command_settings,
    open_state_db,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.redis.config import RedisConfig
from crawlfleet.state.db import StateDB, state_db_url
from crawlfleet.state.sealing import Sealer, new_key, rotate
from crawlfleet.state.tokens import ROLES, create_token, list_tokens, revoke_token

NAME = "manager"
HELP = "the manager service (HTTP API and web dashboard over the fleet), its API tokens and key"

logger = logging.getLogger(__name__)

DEFAULT_PORT = 7700


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1 to 65535, got {port}")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = sub.add_parser("serve", help="run the manager: its HTTP API, and the dashboard at /")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    add_redis_options(serve)
    token = sub.add_parser("token", help="create, list or revoke API tokens")
    tsub = token.add_subparsers(dest="token_action", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="make a token (printed once, as the last line)")
    create.add_argument("name", help="who or what uses it (1-64 letters, digits, . _ @ -)")
    create.add_argument("--role", required=True, choices=ROLES, help="what it may do")
    listing = tsub.add_parser("list", help="the tokens (names and roles; never the tokens)")
    listing.add_argument("--all", action="store_true", help="revoked ones too")
    revoke = tsub.add_parser("revoke", help="revoke a token by name (at once)")
    revoke.add_argument("name")
    key = sub.add_parser("key", help="the key that seals the state DB's secrets")
    ksub = key.add_subparsers(dest="key_action", required=True, metavar="ACTION")
    ksub.add_parser("new", help="print a new key (for CRAWLFLEET_SECRET_KEY)")
    rotating = ksub.add_parser(
        "rotate",
        help="seal every secret with a new key (a new key file's, or the first of "
        "CRAWLFLEET_SECRET_KEY)",
    )
    for p in (serve, create, listing, revoke, rotating):
        p.add_argument("--db", metavar="URL", help="state DB URL (default CRAWLFLEET_STATE_DB_URL)")
        add_settings_option(p)


def run(args: argparse.Namespace) -> int:
    if args.action == "key" and args.key_action == "new":
        print(new_key())
        return 0
    settings = command_settings(args)
    # the key before the DB: a missing key is one line, and nothing is migrated for it
    sealer = Sealer.from_settings(settings, create=False) if args.action == "key" else None
    db = open_state_db(state_db_url(settings))
    if args.action == "serve":
        return _serve(args, settings, db)
    console = Console()
    try:
        if sealer is not None:
            written, said = rotate(db, sealer)
            console.print(f"{written} secrets of {db.shown} sealed again: {said}", highlight=False)
        elif args.token_action == "create":
            token = create_token(db, args.name, args.role)
            console.print(
                f"token {args.name!r} ({args.role}) created in {db.shown}; it is shown "
                "once, keep it secret:",
                highlight=False,
            )
            print(token)
        elif args.token_action == "revoke":
            revoke_token(db, args.name)
            console.print(f"token {args.name!r} revoked")
        else:
            tokens = list_tokens(db, revoked=args.all)
            if not tokens:
                console.print(f"no tokens in {db.shown} (crawlfleet manager token create)")
                return 0
            table = Table(show_edge=False)
            for column in ("name", "role", "created", "last used", "revoked"):
                table.add_column(column)
            for t in tokens:
                d = t.as_dict()
                table.add_row(
                    t.name,
                    t.role,
                    d["created_at"] or "",
                    d["last_used_at"] or "never",
                    d["revoked_at"] or "",
                )
            console.print(table)
    finally:
        db.close()
    return 0


def _serve(args: argparse.Namespace, settings: Settings, db: StateDB) -> int:
    import uvicorn  # only this action needs the server

    from crawlfleet.manager.app import create_app

    url = resolved_url(args, RedisConfig.from_settings(settings))
    app = create_app(settings, url, db)
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        logger.warning(
            "serving on %s: the API is reachable from other machines (tokens travel in "
            "clear over HTTP; put TLS in front)",
            args.host,
        )
    logger.info(
        "manager on http://%s:%d/ (dashboard there, API under /api/v1; state DB %s)",
        args.host,
        args.port,
        db.shown,
    )
    # what start-up made (modules, the app, its routes: most of the process's objects)
    # lives as long as the server: out of the collector's sight, a full collection
    # costs a few ms, not the 50-120 ms that stalled every answer in flight
    gc.collect()
    gc.freeze()
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False)
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        if exc.code:
            raise ConfigError(f"could not serve on {args.host}:{args.port}") from None
    return 0
