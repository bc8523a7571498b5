"""Every crawlfleet setting and its default, in one place.

The add-on installs these at the ``addon`` priority, so a project's own
``settings.py``, a spider's ``custom_settings`` and ``-s NAME=VALUE`` all win.
Each setting is documented in ``docs/settings.md``; names carry their unit.
"""

from __future__ import annotations

# --- Redis --------------------------------------------------------------------------
#: URL of the shared Redis (``redis://``, ``rediss://``, ``unix://``). Empty: scrapy-redis's
#: REDIS_URL, else REDIS_HOST/REDIS_PORT, else start (or join) the embedded Redis under
#: CRAWLFLEET_DATA_DIR. Env CRAWLFLEET_REDIS_URL wins.
CRAWLFLEET_REDIS_URL = ""
#: Directory for local state: the embedded Redis (AOF files, socket, pid), item files.
CRAWLFLEET_DATA_DIR = ".crawlfleet"
#: SQLAlchemy URL of the state DB (tokens, the manager's audit and history):
#: sqlite:///path, postgresql+psycopg://..., mysql+pymysql://... Empty: SQLite file
#: state.sqlite3 under CRAWLFLEET_DATA_DIR. Env CRAWLFLEET_STATE_DB_URL wins.
CRAWLFLEET_STATE_DB_URL = ""
#: The state DB of the manager that started this node through Scrapyd (the manager sets
#: it): used when CRAWLFLEET_STATE_DB_URL is not set, so that the node's failures reach
#: the registry the manager shows.
CRAWLFLEET_MANAGER_STATE_DB_URL = ""
#: How often the manager looks at every job to open and close its runs (history).
CRAWLFLEET_MANAGER_WATCH_SECONDS = 5.0
#: How long a dashboard sign-in lasts (hours).
CRAWLFLEET_MANAGER_SESSION_HOURS = 12.0
#: Largest request body the manager reads (bytes; JSON bodies): larger is a 413,
#: answered before any of it is read, and before the token is checked only for the size.
CRAWLFLEET_MANAGER_MAX_BODY = 1048576
#: Largest egg ``POST /api/v1/deploy`` takes (bytes), streamed to a temporary file.
CRAWLFLEET_MANAGER_MAX_EGG = 104857600
#: Most items one export of a job's items holds (``GET /api/v1/jobs/JOB/items/export``).
CRAWLFLEET_MANAGER_EXPORT_MAX_ITEMS = 100000
#: Keys that seal the secrets the state DB keeps (Scrapyd passwords, webhook URLs,
#: alert signing secrets): Fernet keys, comma-separated, the first seals, all unseal.
#: Empty: the key file secret.key under CRAWLFLEET_DATA_DIR, made on first use.
#: Env CRAWLFLEET_SECRET_KEY wins.
CRAWLFLEET_SECRET_KEY = ""
#: Prefix of every Redis key crawlfleet writes (see crawlfleet.redis.keys).
CRAWLFLEET_KEY_PREFIX = "cf"
#: First and longest wait between reconnection attempts while Redis is unreachable.
CRAWLFLEET_REDIS_RETRY_MIN_SECONDS = 0.5
CRAWLFLEET_REDIS_RETRY_MAX_SECONDS = 10.0
#: Seconds a starting node tries to reach Redis before it gives up (one ERROR line, the
#: spider closes with reason "redis_unreachable", a non-zero exit). Once it has reached
#: Redis, an outage is waited out, however long.
CRAWLFLEET_REDIS_START_TIMEOUT = 30.0

#: Write the node's final Scrapy stats as JSON to this file when it closes. Empty: off.
CRAWLFLEET_STATS_FILE = ""

# --- Job ----------------------------------------------------------------------------
#: Name of the job this node works on. Empty: the spider's name.
CRAWLFLEET_JOB = ""
#: Telemetry extension (crawlfleet.node.telemetry.Telemetry): pages/min, items/min,
#: download latency and event-loop lag published with each heartbeat are measured
#: over this many seconds.
CRAWLFLEET_TELEMETRY_WINDOW_SECONDS = 60.0
#: Telemetry extension: interval of the timer that measures event-loop lag.
CRAWLFLEET_TELEMETRY_LOOP_LAG_SECONDS = 0.5
#: Items each node shows in its status for the dashboard's preview (0: none).
CRAWLFLEET_TELEMETRY_LATEST_ITEMS = 3
#: A long phase of a node says how far it got in its log at most this often: a re-crawl
#: round (failures re-fetched, fixed, failed again, waiting) and a campaign (units done,
#: rate, ETA); nothing in a phase shorter than this (0: no progress lines).
CRAWLFLEET_PROGRESS_SECONDS = 15.0

# --- Feedback (crawlfleet.node.feedback) ---------------------------------------------
#: Adapt each node's concurrency (and so how much work it leases) to its own latency,
#: errors and bans, CPU, memory and event-loop lag (AIMD). False: run
#: CONCURRENT_REQUESTS always.
CRAWLFLEET_FEEDBACK = True
#: Length of one feedback interval: figures are taken and the limit adjusted once per
#: interval.
CRAWLFLEET_FEEDBACK_INTERVAL_SECONDS = 1.0
#: The feedback never runs fewer requests at once than this.
CRAWLFLEET_FEEDBACK_MIN_CONCURRENCY = 1
#: Overloaded when the mean download latency of an interval exceeds this many times
#: its baseline (the lowest recent interval mean).
CRAWLFLEET_FEEDBACK_LATENCY_FACTOR = 3.0
#: Overloaded when more than this share of an interval's outcomes are download errors
#: or ban-like answers (403, 429, 503).
CRAWLFLEET_FEEDBACK_ERROR_RATIO = 0.25
#: Overloaded when the process uses more than this percentage of one core while its
#: event loop lags (a tenth of CRAWLFLEET_FEEDBACK_LOOP_LAG_MS or more).
CRAWLFLEET_FEEDBACK_CPU_PERCENT = 95.0
#: Overloaded when the event loop runs a timer later than this.
CRAWLFLEET_FEEDBACK_LOOP_LAG_MS = 250.0
#: Overloaded when the process's resident memory exceeds this. 0: not checked.
CRAWLFLEET_FEEDBACK_MAX_RSS_MB = 0.0

# --- Frontier -----------------------------------------------------------------------
#: What makes two requests belong to the same site (one queue, one politeness budget):
#: "host", "domain" (registered domain, e.g. example.co.uk) or "ip".
CRAWLFLEET_SITE_KEY = "host"
#: Requests kept leased in the local buffer, ready for the engine. 0:
#: CONCURRENT_REQUESTS (a node holds no more than it can start soon).
CRAWLFLEET_PREFETCH = 0
#: How long a lease lasts unless its node renews it (a heartbeat renews them at least
#: every third of this time).
#: A killed node's requests return to their queue after at most this long.
CRAWLFLEET_LEASE_SECONDS = 30.0
#: Interval of the node heartbeat, which renews leases and reads the job's state.
CRAWLFLEET_HEARTBEAT_SECONDS = 2.0
#: A node that sends no heartbeat for this long counts as dead: its leases return to
#: their queues at the next reclaim (any node's), without waiting for them to expire.
CRAWLFLEET_NODE_TIMEOUT_SECONDS = 10.0
#: How often any node looks for expired leases (and dead nodes' leases) and returns them
#: to their queues.
CRAWLFLEET_RECLAIM_SECONDS = 5.0
#: Longest time new requests and acknowledgements wait in the node before they are
#: sent to Redis in one batch (new requests go at once when the node runs low on work;
#: four times as long while the job has plenty queued, sixteen while a node leases
#: seconds of work at once: they go with the next lease).
CRAWLFLEET_FLUSH_SECONDS = 0.25
#: Largest number of requests (new or acknowledged) sent in one batch.
CRAWLFLEET_FLUSH_BATCH = 500
#: Sites offered to one lease call (the least recently served ready sites).
CRAWLFLEET_LEASE_SITES = 32
#: Start requests (spider.start / start_urls) enter the job once, however many nodes
#: start: they go through the seen-filter even though Scrapy marks them dont_filter.
CRAWLFLEET_START_REQUESTS_ONCE = True

#: Rate limits shared by every node: site pattern (a host, "*.domain" or "*" for any
#: other site) -> "H/Ws" (at most H requests per W seconds), e.g.
#: {"*": "4/1s", "*.example.com": "1/2s"}. `crawlfleet limits set` overrides them at run
#: time. {}: no limits.
CRAWLFLEET_RATE_LIMITS: dict[str, str] = {}
#: Share of each rate-limit window kept free, so that the limit holds in any window
#: however late requests go out: slots are spaced W / H * (1 + margin); a node sends a
#: request at most 30 % of the margin late, else gives it back. The budget is used up
#: to 1 / (1 + margin). Raise it where nodes' machines are overloaded.
CRAWLFLEET_RATE_LIMIT_MARGIN = 0.025
#: Who shares a site's rate-limit budget: "site" (every node of every job), "ip" (the
#: nodes of one egress IP, each IP its own budget), "type" (the nodes running one
#: crawler type) or "type+ip".
CRAWLFLEET_RATE_LIMIT_SCOPE = "site"
#: This node's egress IP for the "ip" scope. Empty: the local address this machine
#: uses to reach Redis.
CRAWLFLEET_NODE_IP = ""
#: This node's crawler type for the "type" scope. Empty: the spider's name.
CRAWLFLEET_CRAWLER_TYPE = ""

#: Adaptive back-off shared by the cluster: a site answering with one of these statuses
#: (or whose latency climbs, see CRAWLFLEET_BACKOFF_LATENCY_FACTOR) gets a wider
#: interval between requests for every node. [] turns the status trigger off.
CRAWLFLEET_BACKOFF_STATUSES = [429, 503]
#: The first back-off interval of a site; each further report doubles it (at most
#: once per current interval), up to CRAWLFLEET_BACKOFF_MAX_SECONDS. A Retry-After
#: header sets a floor.
CRAWLFLEET_BACKOFF_START_SECONDS = 1.0
CRAWLFLEET_BACKOFF_MAX_SECONDS = 60.0
#: Recovery: a site's back-off halves every this many seconds without new reports.
CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS = 30.0
#: A site whose mean download latency climbs above this many times its baseline (and
#: by 100 ms or more) is backed off too. 0: latency does not trigger back-off.
CRAWLFLEET_BACKOFF_LATENCY_FACTOR = 4.0

# --- Seen-filter --------------------------------------------------------------------
#: "exact" (binary fingerprints in a Redis set) or "bloom" (scalable Bloom filter on
#: Redis bitmaps; bounded memory, a small false-positive rate).
CRAWLFLEET_SEEN_MODE = "exact"
#: Bloom mode: URLs the first layer is sized for; further layers double it.
CRAWLFLEET_BLOOM_CAPACITY = 1_000_000
#: Bloom mode: target false-positive rate of the whole filter, all layers together.
CRAWLFLEET_BLOOM_ERROR_RATE = 1e-6
#: Fingerprints a node remembers the job's seen-filter holding (those it queued, and
#: those the filter answered "seen" for): a request with one of them is a duplicate
#: without asking Redis. About 100 bytes of the node's memory each; the oldest half is
#: forgotten when full. 0: every request is checked in Redis.
CRAWLFLEET_SEEN_CACHE_SIZE = 200_000

# --- Shards -------------------------------------------------------------------------
#: Split a job created by this node over this many shards (each its own hash tag, so a
#: Redis Cluster spreads one crawl over its masters; sites go to shards by a stable
#: hash). Set when the job is created (its first seed or node): a job keeps its count.
#: 1: one hash tag, as before; on one Redis, more shards only cost round trips.
CRAWLFLEET_SHARDS = 1

# --- Finishing ----------------------------------------------------------------------
#: Close the node (reason "finished") once the job is finished: queues empty, nothing
#: leased, no node busy. False: stay up waiting for new seeds.
CRAWLFLEET_CLOSE_WHEN_FINISHED = True
#: The job must look finished for this long, on consecutive checks, before nodes close
#: (a node's busy mark stays up until it has sent what it holds, so work in flight keeps
#: the job open whatever the grace; see docs/settings.md for what it does not see).
CRAWLFLEET_FINISH_GRACE_SECONDS = 0.1
#: While waiting for work, polling Redis backs off up to this interval.
CRAWLFLEET_IDLE_MAX_SECONDS = 5.0

# --- Continuous crawls: revisits (see docs/continuous.md) ----------------------------
#: Revisit fetched pages for ever: "off" (each URL is fetched once), "fixed" (every
#: page again after its rule's interval) or "adaptive" (sooner after a change, later
#: after none, within the rule's min and max; HTTP max-age / Expires and a sitemap's
#: changefreq as hints). Off: no revisit component is loaded.
CRAWLFLEET_REVISIT = "off"
#: The interval between two visits of a page, where no rule says otherwise (seconds;
#: the adaptive policy's first interval).
CRAWLFLEET_REVISIT_INTERVAL_SECONDS = 86400.0
#: The shortest and longest interval the adaptive policy may choose (seconds).
CRAWLFLEET_REVISIT_MIN_SECONDS = 3600.0
CRAWLFLEET_REVISIT_MAX_SECONDS = 2592000.0
#: Rules by URL pattern, tried in order (the first whose regular expression matches the
#: URL anywhere wins; none: the defaults above), each
#: {"pattern": "...", "interval": s, "min": s, "max": s, "policy": "fixed"|"adaptive"|"off"}
#: (all but pattern optional); interval 0 or policy "off": never revisited.
CRAWLFLEET_REVISIT_RULES: list[dict[str, object]] = []
#: Ask for a revisited page only if it changed (If-None-Match / If-Modified-Since from
#: its last ETag / Last-Modified): a 304 costs no parse and no item.
CRAWLFLEET_REVISIT_CONDITIONAL = True
#: A tracked page answering 404 or 410 this many visits in a row is dropped from the
#: revisits.
CRAWLFLEET_REVISIT_GONE_AFTER = 3
#: Item fields left out of the change fingerprint (timestamps, tokens, counters): a
#: page whose only change is in these gives no new item version.
CRAWLFLEET_REVISIT_IGNORE_FIELDS: list[str] = []
#: Adaptive policy: a page that changed comes back after its interval times this; one
#: that did not (or answered 304), after its interval times CRAWLFLEET_REVISIT_SLOWER.
CRAWLFLEET_REVISIT_FASTER = 0.5
CRAWLFLEET_REVISIT_SLOWER = 1.5
#: The job's change stream (a Redis stream of the pages that changed or went) is trimmed
#: to about this many entries.
CRAWLFLEET_CHANGES_MAXLEN = 100000
#: When a site has both revisits whose time came and new URLs queued, this share of its
#: requests (from 0 to 1) goes to its revisits, the rest to its new URLs; a share one of
#: them does not use goes to the other.
CRAWLFLEET_REVISIT_SHARE = 0.5

# --- Retries (see docs/antiban.md) ------------------------------------------------
#: A retry (RETRY_TIMES, RETRY_HTTP_CODES...) or a banned request waits this long in
#: the frontier before any node may take it (seconds, +-20 %), doubling with each
#: attempt; a longer Retry-After is honoured. 0: retried without waiting.
CRAWLFLEET_RETRY_BACKOFF = 1.0
#: The longest such wait (seconds).
CRAWLFLEET_RETRY_BACKOFF_MAX = 300.0

# --- Anti-blocking (see docs/antiban.md) ------------------------------------------
#: Browser identities for requests: "" (off: Scrapy's USER_AGENT), "browser" (real
#: browsers' headers from browserforge's generator) or a file with one User-Agent a line.
CRAWLFLEET_USER_AGENTS = ""
#: "site": one identity per site on a node; "request": a new one for every request.
CRAWLFLEET_USER_AGENT_STICKY = "site"

#: Send requests through the fleet's shared proxy pool (docs/antiban.md).
CRAWLFLEET_PROXY_ENABLED = False
#: Proxy URLs (a list or "a,b"), "@file" (one a line), and/or "provider+http://..." (an
#: endpoint listing proxies, asked again when the pool runs low).
CRAWLFLEET_PROXIES: list[str] = []
#: A proxy leaves the pool after this many uses (0: no limit).
CRAWLFLEET_PROXY_MAX_USES = 0
#: ... or after this many failures in a row (refused, dropped, timed out, 407/502/504).
CRAWLFLEET_PROXY_MAX_FAILURES = 3
#: After a failure a proxy rests this long (seconds).
CRAWLFLEET_PROXY_COOLDOWN_SECONDS = 30.0
#: A site that banned a proxy gets other proxies for this long (seconds).
CRAWLFLEET_PROXY_BAN_SECONDS = 600.0
#: With fewer proxies than this in the pool, the provider is asked for more.
CRAWLFLEET_PROXY_MIN_POOL = 5
#: With no proxy for a site, its request waits this long in the frontier (seconds).
CRAWLFLEET_PROXY_WAIT_SECONDS = 10.0

#: Sessions: a cookie jar, a proxy and an identity kept together per site on a node,
#: renewed together after a ban or a proxy failure (cookies on; docs/antiban.md).
CRAWLFLEET_SESSIONS = False

#: Statuses that mean the site refuses the crawler (429 and 503 back off instead).
CRAWLFLEET_BAN_STATUSES = [403]
#: A redirect to a URL matching one of these (regular expressions) is a ban.
CRAWLFLEET_BAN_URL_PATTERNS = [r"captcha", r"/challenge", r"/login", r"/signin", r"/blocked"]
#: A body matching one of these (regular expressions, first 64 KiB) is a ban.
CRAWLFLEET_BAN_BODY_PATTERNS: list[str] = []
#: Times a banned request is tried again (by any node, under a new identity).
CRAWLFLEET_BAN_RETRIES = 2

# --- The error registry (see docs/errors.md) --------------------------------------------
#: Record every request that fails for good (error status, download exception, spider
#: or pipeline exception, dropped item) in the state DB (CRAWLFLEET_STATE_DB_URL), for
#: `crawlfleet errors` and re-crawls. The state DB is opened on the first failure.
CRAWLFLEET_ERRORS = True
#: Once a job's main work is done, its open failures (of these reasons) are crawled
#: again, each at most this many times, before the job finishes (0: no re-crawl phase).
CRAWLFLEET_RECRAWL_ROUNDS = 0
CRAWLFLEET_RECRAWL_REASONS = ["http", "exception", "ban"]

# --- Campaigns (see docs/campaigns.md) --------------------------------------------------
#: The campaign (created with `crawlfleet campaign create`) whose task units this node
#: feeds to its job; "" (default): none.
CRAWLFLEET_CAMPAIGN = ""

# --- Seeding ------------------------------------------------------------------------
#: Redis key read for seeds when the spider has no redis_key and REDIS_START_URLS_KEY is
#: not set, compatible with scrapy-redis: a list, set or sorted set of plain URLs or
#: JSON objects {"url": ..., "meta": ..., "priority": ...}. "%(spider)s" is replaced by
#: the spider name. Empty: no key is read.
CRAWLFLEET_START_URLS_KEY = "%(spider)s:start_urls"
#: Entries read from that key per batch (unless redis_batch_size or
#: REDIS_START_URLS_BATCH_SIZE).
CRAWLFLEET_START_URLS_BATCH = 100

# ======================= item pipeline (see docs/pipelines.md) ======================
#: Item stages the add-on enables, always in this order: "text" (main-text extraction
#: for automatic article items), "encoding", "clean", "validate", "key". [] for none.
CRAWLFLEET_ITEM_STAGES = ["text", "encoding", "clean", "validate", "key"]
#: Stores the add-on enables, any number: "sql", "mongodb", "redis" (a Redis stream
#: that `crawlfleet items work` moves into a store). []: items go only where the
#: project sends them (e.g. FEEDS).
CRAWLFLEET_STORES: list[str] = []

# --- Clean --------------------------------------------------------------------
#: Remove fields whose value is empty after cleaning (None, "", whitespace only,
#: empty list or dict). False: keep them as they are.
CRAWLFLEET_CLEAN_DROP_EMPTY = True
#: Field name -> value given to a field that is missing or empty after cleaning,
#: e.g. {"currency": "EUR"}. Applied after CRAWLFLEET_CLEAN_DROP_EMPTY.
CRAWLFLEET_CLEAN_DEFAULTS: dict[str, object] = {}
#: Fields whose line breaks are kept (paragraphs); every other text field is folded
#: into one line.
CRAWLFLEET_CLEAN_MULTILINE_FIELDS = ["text", "content", "body", "description"]

# --- Encoding -----------------------------------------------------------------
#: Repair mojibake in item strings (UTF-8 read as Latin-1/cp1252, raw bytes kept as
#: surrogate escapes).
CRAWLFLEET_ENCODING_FIX_MOJIBAKE = True
#: Chinese script conversion of text fields: "" (off), "t2s" (Traditional to
#: Simplified) or "s2t" (Simplified to Traditional).
CRAWLFLEET_CHINESE_CONVERT = ""

# --- Text extraction ----------------------------------------------------------
#: Trafilatura's balance between precision and recall: "balanced", "precision" or
#: "recall".
CRAWLFLEET_TEXT_FAVOR = "balanced"
#: Keep the text of tables in the extracted main text.
CRAWLFLEET_TEXT_INCLUDE_TABLES = True
#: Keep reader comments below an article in the extracted main text.
CRAWLFLEET_TEXT_INCLUDE_COMMENTS = False

# --- Validate -----------------------------------------------------------------
#: Item type -> {field: type}; types: str, int, float, number, bool, list, dict, url,
#: any; a trailing "?" makes the field optional (checked only when present). The
#: item type "*" applies to every item. E.g. {"product": {"name": "str",
#: "price": "number", "sku": "str?"}}.
CRAWLFLEET_VALIDATE_FIELDS: dict[str, dict[str, str]] = {}

# --- Key ----------------------------------------------------------------------
#: Item type -> list of fields whose values identify an item (its upsert key);
#: "*" applies to types not listed. Types not listed: the canonical page URL.
CRAWLFLEET_KEY_FIELDS: dict[str, list[str]] = {}

# --- Stores -------------------------------------------------------------------
#: SQLAlchemy URL of the SQL item store: sqlite:///path, postgresql+psycopg://...,
#: mysql+pymysql://... Empty: SQLite file items.sqlite3 under CRAWLFLEET_DATA_DIR.
CRAWLFLEET_SQL_URL = ""
#: Table of the SQL item store (created when missing).
CRAWLFLEET_SQL_TABLE = "crawlfleet_items"
#: Largest number of items written in one batch (one transaction).
CRAWLFLEET_STORE_BATCH_ITEMS = 500
#: Longest time an item waits in the buffer before its batch is written.
CRAWLFLEET_STORE_BATCH_SECONDS = 1.0
#: Items a store holds in memory while it writes or while it is unreachable; when
#: full, the item pipeline waits (back-pressure on the crawl).
CRAWLFLEET_STORE_BUFFER_ITEMS = 10_000
#: First and longest wait between attempts while a store is unreachable.
CRAWLFLEET_STORE_RETRY_MIN_SECONDS = 0.5
CRAWLFLEET_STORE_RETRY_MAX_SECONDS = 30.0
#: On close, how long a store may take to write what it holds; what is left is
#: saved to CRAWLFLEET_DATA_DIR/unwritten/ and written at the next start.
CRAWLFLEET_STORE_CLOSE_TIMEOUT_SECONDS = 60.0
#: A node takes no more work once this many items wait for an item store (one that is
#: down, or slower than the crawl); it says "waiting for the item store" and goes on
#: once they are written: a crash during an outage fetches at most so many pages
#: again, plus those in flight.
CRAWLFLEET_ITEMS_PENDING_MAX = 200
#: Redis stream store (RedisStreamPipeline): trim each job's item stream to about this
#: many entries, dropping the oldest even if no item worker stored them. 0: never trim
#: (items are never lost; workers delete what every group has stored).
CRAWLFLEET_ITEMS_STREAM_MAXLEN = 0
#: Consumer group of the item workers (``crawlfleet items work --group``). Workers of
#: one group share the items; each group gets every item.
CRAWLFLEET_ITEMS_GROUP = "items"
#: Every consumer group that must get every item (e.g. ["items", "search-index"]): the
#: stream store creates them with a job's stream, so that no entry is deleted before
#: each of them has it. CRAWLFLEET_ITEMS_GROUP is always one of them.
CRAWLFLEET_ITEMS_GROUPS: list[str] = []
#: Item workers claim entries that another worker of their group has held unacknowledged
#: for this long (it is taken as dead). Longer than the slowest store write.
CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS = 60.0
#: Item workers delete a stream entry once every consumer group has stored it. False:
#: keep entries (bound the stream with CRAWLFLEET_ITEMS_STREAM_MAXLEN instead).
CRAWLFLEET_ITEMS_DELETE_STORED = True
#: MongoDB item store (MongoStorePipeline, ``items work --to mongodb://...``).
CRAWLFLEET_MONGODB_URL = "mongodb://127.0.0.1:27017"
#: Database of the MongoDB store, unless the URL names one (mongodb://host/<database>).
CRAWLFLEET_MONGODB_DATABASE = "crawlfleet"
#: Collection of the MongoDB store (documents keyed by item key as _id).
CRAWLFLEET_MONGODB_COLLECTION = "crawlfleet_items"
