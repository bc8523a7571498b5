"""What the tests share: one module a topic, each saying what it is for. Test modules
(``test_*.py``) import from here and never from one another; ``conftest.py`` files
only define fixtures, built from these helpers.

Servers and sites on loopback: :mod:`~tests.support.loopback` (a site from a function),
:mod:`~tests.support.failing_site`, :mod:`~tests.support.session_site`,
:mod:`~tests.support.hostile_site`, :mod:`~tests.support.proxy` (forwarding proxies),
:mod:`~tests.support.scrapyd_servers`, :mod:`~tests.support.redis_server`.

Nodes: :mod:`~tests.support.nodes` (node processes on the test site),
:mod:`~tests.support.node_parts` (a scheduler with a stand-in engine),
:mod:`~tests.support.node_spiders`, :mod:`~tests.support.rendered_spider`,
:mod:`~tests.support.archive_spider` (spiders node processes load by name),
:mod:`~tests.support.frontier` (entries and shards made by hand).

The manager and its dashboard: :mod:`~tests.support.manager` (in-process),
:mod:`~tests.support.live_manager` (served by uvicorn), :mod:`~tests.support.browser`,
:mod:`~tests.support.chromium`.

Stores and data: :mod:`~tests.support.databases` (PostgreSQL, MariaDB, SQLite, MongoDB),
:mod:`~tests.support.item_stream`, :mod:`~tests.support.items_command`,
:mod:`~tests.support.failures`, :mod:`~tests.support.article`, :mod:`~tests.support.specs`.

Commands and waiting: :mod:`~tests.support.cli`, :mod:`~tests.support.paths`,
:mod:`~tests.support.waiting`.

Nothing here is imported by the package under ``src/``; node processes of the tests
import the spiders and sites by name (``tests.support.failing_site:FailingSpider``).
"""
