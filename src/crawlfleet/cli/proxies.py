"""``crawlfleet proxies status|add|remove``: the fleet's proxy pool in Redis (see
docs/antiban.md). Proxies are shown with their password as ``***``; ``add`` takes what
``CRAWLFLEET_PROXIES`` takes (URLs, ``@file``), ``remove`` proxy ids (as ``status``
shows them) or URLs; a removed proxy never comes back from a refill."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from redis.asyncio import Redis

from crawlfleet.cli.options import add_fleet_options, command_settings, run_on_redis
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.proxies import ProxyPool, has_secret, parse_sources, proxy_sealer

NAME = "proxies"
HELP = "show, add or remove the proxies of the fleet's shared pool"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = sub.add_parser("status", help="every proxy: state, uses, ok, failures, bans")
    status.add_argument("--json", action="store_true", help="as JSON")
    add = sub.add_parser("add", help="add proxies (URLs or @file) to the pool")
    add.add_argument("proxies", nargs="+")
    remove = sub.add_parser("remove", help="take proxies (ids or URLs) out of the pool")
    remove.add_argument("proxies", nargs="+")
    for p in (status, add, remove):
        add_fleet_options(p)


def run(args: argparse.Namespace) -> int:
    urls: tuple[str, ...] = ()
    if args.action == "add":
        sources = parse_sources(args.proxies)  # ConfigError: one line, password hidden
        if sources.provider:
            raise ConfigError("proxies add: a provider is a node's source, not a proxy")
        urls = sources.urls

    # the key the nodes and the manager share (CRAWLFLEET_SECRET_KEY, else the key
    # file: made for an added URL with credentials, never only to look)
    sealer = proxy_sealer(command_settings(args), create=any(has_secret(u) for u in urls))

    async def action(client: Redis, prefix: str) -> Any:
        pool = ProxyPool(client, prefix, sealer)
        if args.action == "add":
            return await pool.add(urls)
        if args.action == "remove":
            return await pool.remove(args.proxies)
        return await pool.status()

    result = run_on_redis(args, action)
    if args.action == "add":
        added, size = result
        print(f"{added} proxy(ies) added; {size} in the pool")
    elif args.action == "remove":
        print(f"{result} proxy(ies) removed")
    elif args.json:
        print(json.dumps(result, indent=2))
    else:
        for p in result:
            uses = "-" if p["uses"] is None else p["uses"]
            print(
                f"{p['id']}\t{p['state']}\t{uses}\t{p['ok']}\t{p['failures']}\t"
                f"{p['bans']}\t{p['proxy']}"
            )
        if not result:
            print(
                "no proxy in the pool (CRAWLFLEET_PROXIES, crawlfleet proxies add)", file=sys.stderr
            )
    return 0
