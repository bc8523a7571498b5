"""Every ``request.meta`` key crawlfleet reads or writes: a wire format, like the Redis
keys (a request's meta travels with it through the frontier and into the error
registry), so each key is named here once and nowhere else.

This module imports nothing: any layer may use it.
"""

from __future__ import annotations

__all__ = [
    "BAN_META",
    "DELAY_META",
    "ERROR_META",
    "IDENTITY_META",
    "NEW_IDENTITY_META",
    "POOL_PROXY_META",
    "PROXY_WAITS_META",
    "REVISIT_META",
    "SESSION_META",
    "SPEC_DEPTH_META",
    "SPEC_FOLLOW_META",
    "SPEC_ITEM_META",
    "SPEC_PAGE_META",
    "UNIT_ID_META",
    "UNIT_META",
    "USER_AGENT_META",
]

# -- the frontier ----------------------------------------------------------------------
#: Seconds the request waits before it is queued for its site (a retry's back-off, set
#: by crawlfleet.middlewares.retry.FrontierRetry; any code may set it). The scheduler
#: takes it out of the meta: it is not kept with the request.
DELAY_META = "crawlfleet_delay"

#: A tracked page's revisit state (crawlfleet.revisit.state): a small dict of plain
#: values, kept with the request in the frontier from one visit to the next. Scrapy
#: copies meta shallowly (retries, redirects): the dict is changed in place, never
#: replaced, by the parts that share it.
REVISIT_META = "crawlfleet_revisit"

# -- the error registry and campaigns --------------------------------------------------
#: The registry id of the error a request re-crawls.
ERROR_META = "crawlfleet_error"
#: The campaign unit a request belongs to (its label), and on a unit's first request
#: the unit's id (see crawlfleet.node.campaign).
UNIT_META = "crawlfleet_unit"
UNIT_ID_META = "crawlfleet_unit_id"

# -- anti-blocking ---------------------------------------------------------------------
#: How many times the request was banned already (crawlfleet.middlewares.bans).
BAN_META = "crawlfleet_bans"
#: The names of the headers the request's identity set (crawlfleet.middlewares.useragent).
IDENTITY_META = "crawlfleet_identity_headers"
#: The User-Agent the request's identity gave it (for robots.txt rules and for the
#: spider to read).
USER_AGENT_META = "crawlfleet_user_agent"
#: The site refused the last identity (a ban): take a new one for the site, other than
#: the one it refused.
NEW_IDENTITY_META = "crawlfleet_new_identity"
#: The session the request goes out in (crawlfleet.middlewares.sessions): one identity
#: per session.
SESSION_META = "crawlfleet_session"
#: The id of the pool's proxy the request goes through (crawlfleet.middlewares.proxies):
#: its proxy, the proxy's credentials and their header are chosen again for every try,
#: and never stored with the request (in Redis, or in the error registry).
POOL_PROXY_META = "crawlfleet_proxy"
#: How many times the request waited for a proxy.
PROXY_WAITS_META = "crawlfleet_proxy_waits"

# -- spiders written as configuration (crawlfleet.spiders) -----------------------------
#: The item template a page fills.
SPEC_ITEM_META = "spec_item"
#: Whether link rules apply to the page.
SPEC_FOLLOW_META = "spec_follow"
#: Link depth (start pages 0; pagination keeps it).
SPEC_DEPTH_META = "spec_depth"
#: Pagination index (first page 1).
SPEC_PAGE_META = "spec_page"
