"""``/api/v1/campaigns``: campaigns (task units over dates, categories and keywords in
the state DB, fed to a job by its nodes): list, create, status, pause / resume / stop
(pause and resume also pause and resume the job's nodes), extend. ``crawlfleet
campaign`` is the same on the command line."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter

from crawlfleet.campaigns.space import ParamSpace
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.control import command_value
from crawlfleet.frontier.control import ALL_NODES
from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.routes.models import CampaignBody, ExtendBody, NamePath
from crawlfleet.state import campaigns as c

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/campaigns", tags=["campaigns"])


@router.get("", summary="every campaign with its progress")
async def campaigns(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"campaigns": await ctx.in_db(c.list_campaigns, ctx.db)}


@router.post("", status_code=201, summary="a new campaign (running: its nodes feed it)")
async def create(body: CampaignBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    ctx.keys(body.job)  # a valid job name, else 400
    try:
        space = ParamSpace.from_dict(
            {
                "from": body.date_from,
                "to": body.date_to,
                "step": body.step,
                "categories": body.categories,
                "keywords": body.keywords,
            }
        )
    except ValueError as exc:
        raise ConfigError(f"campaign: {exc}") from None
    made = await ctx.in_db(
        c.create_campaign,
        ctx.db,
        body.name,
        job=body.job,
        space=space,
        template=body.url,
        spider=body.spider,
        max_attempts=body.max_attempts,
        units_ahead=body.units_ahead,
    )
    await ctx.record(token.name, "campaign.create", body.job, {"campaign": body.name})
    return made


@router.get("/{name}", summary="a campaign's progress, rate, ETA and failed units")
async def status(name: NamePath, ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return await ctx.in_db(c.campaign_status, ctx.db, name)


@router.post("/{name}/extend", summary="move a campaign's end date later")
async def extend(name: NamePath, body: ExtendBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    done = await ctx.in_db(c.extend_campaign, ctx.db, name, body.to)
    await ctx.record(
        token.name,
        "campaign.extend",
        done["job"],
        {"campaign": name, "to": body.to},
    )
    return done


# after /extend: a path parameter would take "extend" for a command
@router.post("/{name}/{command}", summary="pause, resume or stop a campaign")
async def steer(
    name: NamePath, command: Literal["pause", "resume", "stop"], ctx: Ctx, token: Operator
) -> dict[str, Any]:
    current = await ctx.in_db(c.campaign_status, ctx.db, name)  # unknown: 400, one line
    c.check_command(name, current["state"], command)
    # a stopped campaign finishes what is queued: its job must not stay paused
    kind, value = command_value("pause" if command == "pause" else "resume")
    await ctx.frontier(current["job"]).send_control(ALL_NODES, kind, value)
    done = await ctx.in_db(c.set_campaign_state, ctx.db, name, command)
    await ctx.record(token.name, f"campaign.{command}", done["job"], {"campaign": name})
    return done
