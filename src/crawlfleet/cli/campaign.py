"""``crawlfleet campaign create|list|status|pause|resume|stop|extend``: campaigns, task
units over dates, categories and keywords kept in the state DB with a cursor, fed to a
job by its nodes (``CRAWLFLEET_CAMPAIGN``). See docs/campaigns.md.

``pause`` and ``resume`` also pause and resume the campaign's job (its nodes stop
sending requests within a second), which needs the job's Redis; ``stop`` feeds nothing
more: what is queued is crawled and stored (the job is resumed if it was paused), then
the nodes close.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crawlfleet.campaigns.space import STEPS, ParamSpace
from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    command_settings,
    open_state_db,
    run_on_frontier,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.control import command_value
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.state.db import state_db_url

NAME = "campaign"
HELP = "create, list, watch and steer campaigns (task units kept in the state DB)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="a new campaign over dates, categories, keywords")
    create.add_argument("name")
    create.add_argument("--job", required=True, help="the job its nodes crawl")
    create.add_argument(
        "--url",
        default="",
        help="start URL template: {date} ({date:%%Y/%%m/%%d}), {category}, {keyword}",
    )
    create.add_argument("--spider", default="", help="what the nodes run (shown only)")
    create.add_argument("--from", dest="date_from", metavar="DATE", help="first date")
    create.add_argument("--to", dest="date_to", metavar="DATE", help="last date")
    create.add_argument("--step", choices=STEPS, default="day")
    create.add_argument("--categories", metavar="A,B|@FILE", help="a list, or a file")
    create.add_argument("--keywords", metavar="A,B|@FILE", help="a list, or a file")
    create.add_argument("--max-attempts", type=int, default=3, help="feeds per unit (3)")
    create.add_argument("--units-ahead", type=int, default=20, help="units in flight (20)")
    listing = sub.add_parser("list", help="every campaign, one a line")
    status = sub.add_parser("status", help="one campaign's progress, rate, ETA, failed units")
    status.add_argument("name")
    status.add_argument("--json", action="store_true", help="as JSON")
    steer = []
    for action, text in (
        ("pause", "stop feeding units and pause the job"),
        ("resume", "feed units again and resume the job"),
        ("stop", "feed nothing more; what is queued is finished"),
    ):
        p = sub.add_parser(action, help=text)
        p.add_argument("name")
        steer.append(p)
    for p in steer:
        add_redis_options(p)
    extend = sub.add_parser("extend", help="move the end date later")
    extend.add_argument("name")
    extend.add_argument("--to", dest="date_to", required=True, metavar="DATE")
    for p in (create, listing, status, *steer, extend):
        p.add_argument("--db", metavar="URL", help="state DB URL (default CRAWLFLEET_STATE_DB_URL)")
        add_settings_option(p)


def _values(text: str | None, what: str) -> tuple[str, ...]:
    if not text:
        return ()
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"--{what}: cannot read {path}: {exc.strerror}") from None
        return tuple(v.strip() for v in lines if v.strip() and not v.startswith("#"))
    return tuple(v.strip() for v in text.split(",") if v.strip())


def space_from_args(args: argparse.Namespace) -> ParamSpace:
    try:
        return ParamSpace.from_dict(
            {
                "from": args.date_from,
                "to": args.date_to,
                "step": args.step,
                "categories": _values(args.categories, "categories"),
                "keywords": _values(args.keywords, "keywords"),
            }
        )
    except ValueError as exc:
        raise ConfigError(f"campaign: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from crawlfleet.state import campaigns as c

    settings = command_settings(args)  # --db is CRAWLFLEET_STATE_DB_URL
    db = open_state_db(state_db_url(settings))
    try:
        if args.action == "create":
            made = c.create_campaign(
                db,
                args.name,
                job=validate_job_name(args.job),
                space=space_from_args(args),
                template=args.url,
                spider=args.spider,
                max_attempts=args.max_attempts,
                units_ahead=args.units_ahead,
            )
            print(
                f"campaign {made['name']}: {made['total']} unit(s) for job {made['job']} "
                f"in {db.shown}; start nodes with -s CRAWLFLEET_CAMPAIGN={made['name']}"
            )
            return 0
        if args.action == "list":
            rows = c.list_campaigns(db)
            for row in rows:
                print(_line(row))
            if not rows:
                print(f"no campaign in {db.shown}", file=sys.stderr)
            return 0
        if args.action == "status":
            status = c.campaign_status(db, args.name)
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                _print_status(status)
            return 0
        if args.action == "extend":
            print(_line(c.extend_campaign(db, args.name, args.date_to)))
            return 0
        status = c.campaign_status(db, args.name)  # unknown: one line before Redis
        c.check_command(args.name, status["state"], args.action)
        # a stopped campaign finishes what is queued: its job must not stay paused
        _steer_job(args, status["job"], "pause" if args.action == "pause" else "resume", settings)
        done = c.set_campaign_state(db, args.name, args.action)
        print(_line(done))
        return 0
    finally:
        db.close()


def _steer_job(args: argparse.Namespace, job: str, command: str, settings: Any) -> None:
    kind, value = command_value(command)

    async def action(frontier: JobFrontier) -> int:
        return await frontier.send_control("*", kind, value)

    run_on_frontier(args, job, action, must_exist=False, settings=settings)


def _line(row: dict[str, Any]) -> str:
    units = row["units"]
    return (
        f"{row['name']}\t{row['state']}\tjob {row['job']}\t"
        f"{units['done']}/{row['total']} done, {units['failed']} failed\t"
        f"{row['progress'] * 100:.1f}%"
    )


def _print_status(s: dict[str, Any]) -> None:
    units = s["units"]
    print(f"campaign {s['name']} ({s['state']}), job {s['job']}")
    print(f"  units      {s['total']:>9}   cursor at {s['cursor']}")
    for state in ("done", "failed", "fed", "leased", "pending"):
        print(f"  {state:<10} {units[state]:>9}")
    print(f"  progress   {s['progress'] * 100:>8.1f}%   {s['rate_per_min']:g} unit(s)/min")
    if s["eta_seconds"] is not None:
        print(f"  ETA        {_duration(s['eta_seconds']):>9}")
    for f in s.get("failed", [])[:20]:
        print(f"  failed: {f['unit']} ({f['attempts']} attempt(s)): {f['error']}")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
