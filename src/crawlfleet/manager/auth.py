"""Who is calling, one dependency per role: ``Depends(require("operator"))``.

A caller is a bearer token (``Authorization: Bearer TOKEN``: scripts, the CLI) or a
dashboard session (the ``crawlfleet_session`` cookie, from signing in at ``/``). A
change made through a session (any method but GET and HEAD) must carry the session's
CSRF token in ``X-CSRF-Token`` and, if the browser sends an ``Origin``, come from the
manager's own host (the scheme is not compared: a TLS proxy in front changes it).
Missing or unknown credentials: 401; a role below the one needed or a failed CSRF
check: 403. Either way the handler does not run.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.signin import check_waiting, client_of
from crawlfleet.state.sessions import SessionInfo, session_of
from crawlfleet.state.tokens import ROLES, TokenInfo, authenticate, role_allows

__all__ = [
    "CALLER_SCOPE_KEY",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "Admin",
    "Caller",
    "Ctx",
    "Operator",
    "Viewer",
    "bearer",
    "check_csrf",
    "context",
    "identify",
    "require",
    "session_from",
]

SESSION_COOKIE = "crawlfleet_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD"})

bearer = HTTPBearer(auto_error=False, description="a token from `crawlfleet manager token create`")


def context(request: Request) -> ManagerContext:
    ctx: ManagerContext = request.app.state.ctx
    return ctx


async def context_dependency(request: Request) -> ManagerContext:
    """:func:`context` as a dependency (async: FastAPI runs a plain one in a thread)."""
    return context(request)


async def session_from(request: Request) -> SessionInfo | None:
    """The live dashboard session of *request*'s cookie, or None (looked up at most
    once every few seconds: :mod:`crawlfleet.manager.callers`)."""
    sid = request.cookies.get(SESSION_COOKIE)
    if not sid:
        return None
    ctx = context(request)
    return await ctx.callers.lookup("session", sid, lambda: ctx.in_db(session_of, ctx.db, sid))


def check_csrf(request: Request, session: SessionInfo) -> None:
    """403 unless a change through *session* carries its CSRF token and, where the
    browser says where it comes from, comes from this manager's origin."""
    if request.method in SAFE_METHODS:
        return
    origin = request.headers.get("origin")
    # the host only: behind a TLS proxy the manager sees http for the browser's https
    if origin is not None and origin.partition("://")[2] != request.url.netloc:
        raise HTTPException(403, f"a change from another origin ({origin[:100]}) is refused")
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        raise HTTPException(403, f"the {CSRF_HEADER} header is missing or wrong")


@dataclass(frozen=True)
class Caller:
    """Who made a request: its token, and the dashboard session it came through (None
    for a bearer token)."""

    token: TokenInfo
    session: SessionInfo | None


#: Where :func:`identify` keeps the request's caller in its ASGI scope, so that the
#: edge (which checks the caller before a body is read) and the route's role check
#: look the token up once.
CALLER_SCOPE_KEY = "crawlfleet.caller"


async def identify(request: Request) -> Caller:
    """The caller of *request* (a bearer token, else the session cookie), remembered in
    its scope; HTTPException 401 when there is none or it is unknown, revoked or ended."""
    known: Caller | None = request.scope.get(CALLER_SCOPE_KEY)
    if known is not None:
        return known
    ctx = context(request)
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    credentials = credentials.strip() if scheme.lower() == "bearer" else ""
    session: SessionInfo | None = None
    if not credentials and request.cookies.get(SESSION_COOKIE):
        session = await session_from(request)
        if session is None:
            raise HTTPException(401, "the dashboard session has ended: sign in again")
        token = session.token
    else:
        if not credentials:
            raise HTTPException(401, "an API token is needed: Authorization: Bearer TOKEN")
        client = client_of(request)
        check_waiting(ctx.sign_ins, client)  # a wrong bearer token is a failed sign-in too
        found = await ctx.callers.lookup(
            "token", credentials, lambda: ctx.in_db(authenticate, ctx.db, credentials)
        )
        if found is None:
            ctx.sign_ins.failed(client)
            raise HTTPException(401, "the API token is not valid (unknown or revoked)")
        ctx.sign_ins.succeeded(client)
        token = found
    caller = Caller(token, session)
    request.scope[CALLER_SCOPE_KEY] = caller
    return caller


def require(role: str) -> Callable[..., Awaitable[TokenInfo]]:
    """A dependency that yields the caller's token if its role allows *role* (a change
    through a dashboard session must also pass :func:`check_csrf`)."""
    assert role in ROLES, role

    async def dependency(
        request: Request,
        # declared for the OpenAPI document (its security scheme); read by identify()
        _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> TokenInfo:
        caller = await identify(request)
        if caller.session is not None:
            check_csrf(request, caller.session)
        token = caller.token
        if not role_allows(token.role, role):
            raise HTTPException(
                403, f"token {token.name!r} ({token.role}) may not do this: {role} needed"
            )
        return token

    return dependency


#: The request's ManagerContext, and the caller's token checked for a role.
Ctx = Annotated[ManagerContext, Depends(context_dependency)]
Viewer = Annotated[TokenInfo, Depends(require("viewer"))]
Operator = Annotated[TokenInfo, Depends(require("operator"))]
Admin = Annotated[TokenInfo, Depends(require("admin"))]
