"""``/session``: the dashboard's sign-in. ``POST`` with a token sets the session cookie
(HttpOnly, SameSite=Strict, Secure over HTTPS) and answers the CSRF token that changes
made through the session must carry; ``GET`` says who is signed in; ``DELETE`` signs
out. Scripts use bearer tokens and never need a session."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from crawlfleet.manager.auth import SESSION_COOKIE, Ctx, check_csrf, session_from
from crawlfleet.manager.routes.models import SignInBody
from crawlfleet.manager.signin import check_waiting, client_of
from crawlfleet.state.sessions import SessionInfo, end_session, start_session

__all__ = ["router"]

router = APIRouter(prefix="/session", tags=["session"])


def _who(info: SessionInfo) -> dict[str, Any]:
    return {"name": info.token.name, "role": info.token.role, "csrf": info.csrf}


@router.post("", summary="sign in with a token: sets the session cookie")
async def sign_in(
    body: SignInBody, request: Request, response: Response, ctx: Ctx
) -> dict[str, Any]:
    client = client_of(request)
    check_waiting(ctx.sign_ins, client)
    started = await ctx.in_db(start_session, ctx.db, body.token.strip(), ctx.session_hours)
    if started is None:
        ctx.sign_ins.failed(client)
        raise HTTPException(401, "the token is not valid (unknown or revoked)")
    ctx.sign_ins.succeeded(client)
    sid, info = started
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        max_age=int(ctx.session_hours * 3600),
        path="/",
        httponly=True,
        samesite="strict",
        # over HTTPS, or behind a TLS proxy that says so
        secure=request.url.scheme == "https"
        or request.headers.get("x-forwarded-proto", "").lower() == "https",
    )
    await ctx.record(info.token.name, "session.start", None, {})
    return _who(info)


@router.get("", summary="who is signed in (and the session's CSRF token)")
async def who(request: Request) -> dict[str, Any]:
    info = await session_from(request)
    if info is None:
        raise HTTPException(401, "not signed in")
    return _who(info)


@router.delete("", summary="sign out: the session ends and its cookie is cleared")
async def sign_out(request: Request, response: Response, ctx: Ctx) -> dict[str, Any]:
    info = await session_from(request)
    if info is not None:
        check_csrf(request, info)
        await ctx.in_db(end_session, ctx.db, request.cookies[SESSION_COOKIE])
        await ctx.record(info.token.name, "session.end", None, {})
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return {"signed_out": info is not None}
