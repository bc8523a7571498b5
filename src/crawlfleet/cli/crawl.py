"""``crawlfleet crawl SPIDER``: run one node of a job (a Scrapy process with the add-on)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import CrawlerProcess
from scrapy.settings import SETTINGS_PRIORITIES, Settings
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.misc import load_object
from twisted.python.failure import Failure

from crawlfleet.addon import Addon
from crawlfleet.cli.arguments import add_pairs_option, pairs
from crawlfleet.cli.options import (
    add_fleet_options,
    check_reachable,
    parse_settings,
    project_settings,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.records import printable
from crawlfleet.node.launcher import MAX_PROCESSES, numbered, preload, run_processes, usable_cpus
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import redact

NAME = "crawl"
#: Scrapy sets up logging for this command (see cli.main)
SCRAPY_LOGGING = True
HELP = (
    "run a node: crawl with SPIDER (a spec file, a spider's .py file, module:Class, or a "
    "spider name)"
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spider",
        help="spec file (.yaml/.json), a .py file (FILE.py or FILE.py:Class), module:Class "
        "(importable from here), or a spider name",
    )
    parser.add_argument("--job", help="job name (default: the spider's name)")
    add_pairs_option(parser, "-a", dest="spider_args", help="spider argument")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="append items to FILE (feed export: .jsonl, .csv, ...)",
    )
    parser.add_argument(
        "--processes",
        type=_process_count,
        default=1,
        metavar="N",
        help="run N nodes of the job from this command, each a process of its own "
        "(forked once Scrapy and the spider's parts are imported: they start faster and "
        "share that memory); with N > 1 each writes its own -o file (items.jsonl -> "
        "items.1.jsonl, ...); 'auto': one a CPU this command may use (default 1)",
    )
    add_fleet_options(parser)


def _process_count(text: str) -> int:
    if text == "auto":
        return min(usable_cpus(), MAX_PROCESSES)
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number or 'auto': {text!r}") from None
    if not 1 <= count <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"{count} is not between 1 and {MAX_PROCESSES}")
    return count


def node_settings(values: dict[str, Any], *, job: str | None = None) -> Settings:
    """Project settings (when in a Scrapy project) + the add-on + *values*."""
    settings = project_settings()
    addons = dict(settings.getdict("ADDONS"))
    if not any(load_object(k) is Addon if isinstance(k, str) else k is Addon for k in addons):
        addons[Addon] = 100
    settings.set("ADDONS", addons, priority="cmdline")
    for name, value in values.items():
        settings.set(name, value, priority="cmdline")
    if job:
        settings.set("CRAWLFLEET_JOB", job, priority="cmdline")
    return settings


SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def _spider_in_file(target: str) -> type[Spider]:
    """The spider class of ``FILE.py`` (its one spider, as ``scrapy runspider`` takes it)
    or ``FILE.py:Class``."""
    path, _, name = target.partition(":") if ".py:" in target else (target, "", "")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"spider file {path!r} not found")
    module_name = f"crawlfleet_spider_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load spider file {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"cannot load spider file {path!r}: {exc}") from None
    spiders = [  # defined there, and named (a base class without a name is not one)
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, Spider)
        and cls.__module__ == module_name
        and getattr(cls, "name", None)
    ]
    if name:
        chosen = getattr(module, name, None)
        if chosen is None:
            found = ", ".join(c.__name__ for c in spiders) or "none"
            raise ConfigError(f"no class {name!r} in {path!r} (its spiders: {found})")
        return chosen  # type: ignore[no-any-return]
    if len(spiders) != 1:
        found = ", ".join(c.__name__ for c in spiders)
        raise ConfigError(
            f"{len(spiders) or 'no'} Scrapy spider classes in {path!r}"
            + (f" ({found}): name one as {path}:Class" if spiders else "")
        )
    return spiders[0]


def resolve_spider(target: str, settings: Settings) -> type[Spider]:
    """The spider class for *target*: a spec file, a spider's ``.py`` file (``FILE.py``
    with one spider, or ``FILE.py:Class``), ``module:Class`` (importable from the
    current directory, as with ``python -m``), or a spider name in the current Scrapy
    project."""
    if target.lower().endswith(SPEC_SUFFIXES):
        from crawlfleet.spiders.config_spider import SpecSpider
        from crawlfleet.spiders.spec import load_spec

        return SpecSpider.from_spec(load_spec(target))
    if target.endswith(".py") or ".py:" in target:
        cls: Any = _spider_in_file(target)
    elif ":" in target:
        module, _, name = target.partition(":")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            cls = load_object(f"{module}.{name}")
        except (ImportError, NameError, AttributeError, ValueError) as exc:
            raise ConfigError(f"cannot load spider {target!r}: {exc}") from None
    else:
        loader = get_spider_loader(settings)
        try:
            cls = loader.load(target)
        except KeyError:
            known = sorted(loader.list())
            close = difflib.get_close_matches(target, known, n=1, cutoff=0.6)
            if close:
                hint = f"did you mean {close[0]!r}?"
            elif known:
                hint = f"the project's spiders: {', '.join(known[:10])}"
            else:
                hint = "no Scrapy project here has spiders: use a spec file or module:Class"
            raise ConfigError(f"spider {target!r} not found: {hint}") from None
    if not (isinstance(cls, type) and issubclass(cls, Spider)):
        raise ConfigError(f"{target!r} is not a Scrapy spider class")
    return cls


def run(args: argparse.Namespace) -> int:
    values = parse_settings(args)
    if args.output:
        values["FEEDS"] = {args.output: {"format": _feed_format(args.output)}}
    settings = node_settings(values, job=args.job)
    spidercls = resolve_spider(args.spider, settings)
    spider_args = pairs(args.spider_args, "-a")
    probe = check_settings(settings, spidercls)
    # a wrong URL or a Redis that is down is one line now, not a node retrying in silence;
    # once running, the node rides out Redis outages on its own
    check_reachable(resolved_url(args, RedisConfig.from_settings(probe), quiet=True))
    if args.processes == 1:
        return crawl(settings, spidercls, spider_args)
    preload(probe)
    _fresh_log(probe)
    gc.freeze()  # what every node shares, out of their collectors' way (copy-on-write)
    return run_processes(
        args.processes,
        lambda index: crawl(own_settings(settings, probe, index), spidercls, spider_args),
    )


def own_settings(settings: Settings, probe: Settings, index: int) -> Settings:
    """*settings* for node *index* of several started by one command: each writes its
    own feeds (every URI of FEEDS but ``stdout:``, ``-o`` among them: a local file or a
    remote object) and stats file, numbered (``items.jsonl`` -> ``items.2.jsonl``,
    ``s3://b/items.jl`` -> ``s3://b/items.2.jl``), keeps its own ``JOBDIR``
    (``JOBDIR/node-2``: the spider's ``state``, which Scrapy saves at the close), and
    its log lines, which share the terminal or ``LOG_FILE`` (appended to: see
    :func:`_fresh_log`), carry its number (``[node 2]`` after the time), unless
    ``LOG_FORMAT`` is set; *probe*: the settings as the node will see them (the
    spider's own applied), where those files are named."""
    own = settings.copy()
    feeds = {
        (uri if str(uri).startswith("stdout:") else numbered(str(uri), index)): options
        for uri, options in probe.getdict("FEEDS").items()
    }
    if feeds:
        own.set("FEEDS", feeds, priority="cmdline")
    stats_file = probe.get("CRAWLFLEET_STATS_FILE")
    if stats_file:
        own.set("CRAWLFLEET_STATS_FILE", numbered(str(stats_file), index), priority="cmdline")
    job_dir = probe.get("JOBDIR")
    if job_dir:  # the spider's state (spider.state), saved by each node as it closes
        own.set("JOBDIR", os.path.join(str(job_dir), f"node-{index}"), priority="cmdline")
    if probe.get("LOG_FILE"):
        own.set("LOG_FILE_APPEND", True, priority="cmdline")
    # the command's own settings: a spider's LOG_FORMAT still wins once its crawler
    # applies it, and Scrapy's first lines, logged before, are numbered too
    log_format = settings.get("LOG_FORMAT")
    if log_format and settings.getpriority("LOG_FORMAT") == SETTINGS_PRIORITIES["default"]:
        own.set("LOG_FORMAT", _numbered_format(str(log_format), index), priority="default")
    return own


def _fresh_log(probe: Settings) -> None:
    """Empty ``LOG_FILE`` once, before the nodes that share it start, if
    ``LOG_FILE_APPEND`` is off: each node appends (emptying it as it opened it, a node
    would lose the lines of those that started before it). A file that cannot be opened
    is left to the nodes, which say why, as one node would."""
    log_file = probe.get("LOG_FILE")
    if log_file and not probe.getbool("LOG_FILE_APPEND"):
        with contextlib.suppress(OSError), open(str(log_file), "w"):
            pass


def _numbered_format(log_format: str, index: int) -> str:
    """Scrapy's log format with ``[node INDEX]`` after the time (first if no time)."""
    mark = f"[node {index}] "
    time_field = "%(asctime)s "
    if log_format.startswith(time_field):
        return time_field + mark + log_format[len(time_field) :]
    return mark + log_format


def crawl(settings: Settings, spidercls: type[Spider], spider_args: dict[str, str]) -> int:
    """Run one node in this process until it closes; its exit status."""
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spidercls)
    refused: list[ConfigError] = []
    failed: list[Failure] = []

    def crawl_failed(failure: Failure) -> None:
        # a component's own setting, found when Scrapy builds it: one line, exit 2;
        # anything else that stops the crawl (a spider that refuses its arguments): one
        # line, exit 1, the traceback with -v
        if isinstance(failure.value, ConfigError):
            logger.error("crawlfleet: %s", failure.value)
            refused.append(failure.value)
            return
        error = failure.value
        logger.debug("The crawl's error", exc_info=error)
        what = "could not start" if getattr(crawler, "spider", None) is None else "failed"
        logger.error(  # last: the line to read, after the traceback (a debug log's)
            "crawlfleet: %s %s: %s: %s",
            spidercls.__name__,
            what,
            type(error).__name__,
            redact(printable(str(error))),
        )
        failed.append(failure)

    process.crawl(crawler, **spider_args).addErrback(crawl_failed)
    crawler.signals.connect(_freeze_startup_objects, signal=signals.engine_started)
    try:
        process.start()
    finally:
        gc.enable()  # a node that stopped before its engine started
    if refused:
        return 2
    if failed:
        return 1
    stats = crawler.stats
    reason = stats.get_value("finish_reason") if stats else None
    if stats and stats.get_value("crawlfleet/frontier/unstored"):
        return 1  # pages given back unfinished (a store was down at the stop)
    if stats and stats.get_value("crawlfleet/node/unfinished"):
        return 1  # Redis unreachable at the close: work left for lease expiry
    return 0 if reason in SUCCESSFUL else 1


def _freeze_startup_objects() -> None:
    """Once the engine has started: leave what start-up built (modules, components,
    settings) out of the cyclic garbage collector's passes, and turn the collector back
    on (``crawlfleet crawl`` starts with it off: crawlfleet.cli.main.NODE_COMMAND). It
    lives as long as the node, yet every full pass would scan it again, tens of
    milliseconds each on the event loop's thread (CPU per page, and loop lag that the
    feedback controller reads as overload). Start-up's own cyclic garbage (about 2,300
    objects, 0.5 MiB, measured on a node of the bundled benchmark spider) is frozen with
    it: a full collection first would cost 40-150 ms on the way to the first request."""
    gc.freeze()
    gc.enable()


#: Close reasons of a node that did what it was asked: the job finished, a stop
#: (Ctrl-C, SIGTERM; drained and stopped: crawlfleet control), or a CLOSESPIDER_* bound
#: the operator set that is not an error count.
SUCCESSFUL = frozenset(
    {
        "finished",
        "shutdown",
        "drained",
        "stopped",
        "closespider_pagecount",
        "closespider_pagecount_no_item",
        "closespider_itemcount",
        "closespider_timeout",
        "closespider_timeout_no_item",
    }
)


def check_settings(settings: Settings, spidercls: type[Spider]) -> Settings:
    """Validate the node's crawlfleet settings (with the spider's custom_settings) before
    Scrapy starts, so that a mistake is one clear line, not a traceback; returns the
    settings as the node will see them (the add-on's and the spider's applied)."""
    probe = settings.copy()
    addon = Addon()
    addon.quiet = True  # the node says what it takes over once its logging is set up
    addon.update_settings(probe)  # Scrapy applies add-ons only when it builds the crawler
    spidercls.update_settings(probe)
    FrontierConfig.from_settings(probe, getattr(spidercls, "name", "") or "")
    RedisConfig.from_settings(probe)
    return probe


def _feed_format(path: str) -> str:
    suffix = path.rsplit(".", 1)[-1].lower()
    return {
        "jsonl": "jsonlines",
        "jl": "jsonlines",
        "json": "json",
        "csv": "csv",
        "xml": "xml",
    }.get(suffix, "jsonlines")
