"""Seeding as the CLI and the API share it (crawlfleet.fleet.seeds): entries read in
batches, each committed as it comes, on a real Redis; and the form a plain URL seed is
stored in, which must be the one Scrapy's own request, fingerprinter and crawlfleet's
codec give it (nodes read seeds as any other request)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.utils.request import RequestFingerprinter
from w3lib.url import canonicalize_url, safe_url_string

from crawlfleet.fleet.seedform import PLAIN, SeedForm, seed_form, short_way_agrees
from crawlfleet.fleet.seeds import INVALID_KEPT, SeedResult, queue_seeds, seed_batches
from crawlfleet.frontier.records import FINGERPRINT_BYTES
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.spiders.seeding import parse_seed

#: URLs whose safe form, canonical form or host are not the text as given
URLS = [
    "https://h1.example/p/1",
    "http://h.example",
    "https://Example.COM:443/a b/%7Euser/./x/../y?b=2&a=1&a=0#frag",
    "HTTPS://UPPER.EXAMPLE/Path?Q=A#X",
    "http://bücher.example/straße?q=ä&z",
    "http://xn--bcher-kva.example/",
    "https://user:pw@h.example:8080/a?b",
    "http://[::1]:80/x",
    "http://[2001:DB8::0:1]/a/../b",
    "http://h.example/a%2Fb?c=d;e&c=a",
    "http://h.example/päth with space/?q=1 2&empty=",
    "http://h.example:/a",
    "http://h.example/?",
    "http://h.example/#",
    "http://ex.com/%zz%",
    "http://h.example/a\tb",
    "  https://padded.example/x  ",
    "http://127.0.0.1:9/ip",
    "https://h.example/%E2%82%AC?x=%e2%82%ac",
]


def scrapy_form(entry: str) -> SeedForm:
    """The form the seed of *entry* had when seeding built a Request for every seed."""
    request = parse_seed(entry)
    return SeedForm(
        RequestFingerprinter().fingerprint(request)[:FINGERPRINT_BYTES],
        SiteKeyer.host(request),
        request.priority,
        RequestCodec(None).encode(request),
    )


@pytest.mark.parametrize("url", URLS)
def test_a_plain_url_seed_is_stored_as_scrapy_would_store_it(url: str) -> None:
    assert short_way_agrees()
    assert seed_form(url) == scrapy_form(url)


#: URLs close to plain ones (crawlfleet.fleet.seedform.PLAIN) that are not: each
#: differs from its safe or canonical form, or is read another way (an IPv4 number, an
#: IDNA label); they take the long way
NEAR_PLAIN = [
    "http://h.example",
    "http://H.example/",
    "http://h.example/./a",
    "http://h.example/a/../b",
    "http://h.example//a",
    "http://h.example/.a",
    "http://h.example:80/",
    "http://h.example/a%7Eb",
    "http://h.example/a?",
    "http://h.example/a#",
    "http://1.2.3.4/",
    "http://h.example/a;b",
    "http://xn--bcher-kva.example/",
    "http://ab--cd.example/",
    "http://-a.example/",
    "http://a-.example/",
    "http://a.example./",
    "http://a.example/a b",
]


@pytest.mark.parametrize("url", NEAR_PLAIN)
def test_a_url_close_to_plain_takes_the_long_way_as_scrapy_does(url: str) -> None:
    assert not (PLAIN.fullmatch(url) and "--" not in url)
    assert seed_form(url) == scrapy_form(url)


@settings(max_examples=200, deadline=None)
@given(st.from_regex(PLAIN, fullmatch=True).filter(lambda u: "--" not in u))
def test_a_plain_url_is_its_own_safe_and_canonical_form(url: str) -> None:
    assert safe_url_string(url) == url and canonicalize_url(url) == url
    assert seed_form(url) == scrapy_form(url)


def test_a_json_seed_keeps_its_meta_and_priority() -> None:
    entry = '{"url": "https://a.example/x", "meta": {"k": 1}, "priority": 5}'
    form = seed_form(entry)
    assert form == scrapy_form(entry) and form.priority == 5
    decoded = RequestCodec(None).decode(form.payload)
    assert decoded.meta == {"k": 1} and decoded.priority == 5


def test_batches_are_bounded_and_number_every_entry() -> None:
    entries = [
        "https://a.example/1",
        "not a url",
        "https://a.example/2",
        "https://a.example/3",
        "ftp://x.example/",  # entry 5: the edge of the first batch of 3 seeds
        "https://a.example/4",
        '{"url": 3}',
        "https://a.example/5",
        "https://a.example/6",
        "https://a.example/7",
    ]
    read: list[int] = []

    def stream() -> Iterator[str]:
        for n, entry in enumerate(entries, 1):
            read.append(n)
            yield entry

    result = SeedResult()
    batches = seed_batches(stream(), result, size=3)
    assert batches is not None
    assert read == [1, 2, 3, 4]  # the first batch only, read before seeding starts
    sizes = [len(b) for b in batches]
    assert sizes == [3, 3, 1] and read == list(range(1, 11))
    assert result.entries == 10 and result.invalid_count == 3
    assert [(n, text) for n, text, _ in result.invalid] == [
        (2, "not a url"),
        (5, "ftp://x.example/"),
        (7, '{"url": 3}'),
    ]


def test_no_seed_is_none_with_every_entry_counted() -> None:
    result = SeedResult()
    assert seed_batches([], result) is None and result.entries == 0
    entries = [f"not a url {i}" for i in range(INVALID_KEPT + 50)]
    assert seed_batches(entries, result) is None
    assert result.invalid_count == INVALID_KEPT + 50 and len(result.invalid) == INVALID_KEPT
    assert result.invalid[-1][0] == INVALID_KEPT  # the first ones are kept
    shown = result.as_dict()
    assert shown["invalid_count"] == INVALID_KEPT + 50 and len(shown["invalid"]) == 20  # type: ignore[arg-type]


async def _seed(url: str, prefix: str, entries: Iterator[str] | list[str], size: int) -> SeedResult:
    client = make_client(url)
    try:
        result = SeedResult()
        batches = seed_batches(entries, result, size=size)
        assert batches is not None
        frontier = JobFrontier(client, JobKeys.of(prefix, "seeded"))
        seen: list[tuple[int, int]] = []
        await queue_seeds(
            frontier,
            batches,
            "host",
            result,
            progress=lambda r: seen.append((r.queued, r.duplicates)),
        )
        assert seen[-1] == (result.queued, result.duplicates)
        return result
    finally:
        await client.aclose()


async def _queued(url: str, prefix: str) -> tuple[int, int]:
    client = make_client(url)
    try:
        frontier = JobFrontier(client, JobKeys.of(prefix, "seeded"))
        return (await frontier.counters())["queued"], (await frontier.sizes())["sites"]
    finally:
        await client.aclose()


def test_duplicates_across_batches_are_queued_once(redis_server_url: str, key_prefix: str) -> None:
    entries = [f"https://s{i % 3}.example/{i}" for i in range(10)]
    entries += [entries[0], "https://S0.example/0#again", entries[9], entries[4]]
    result = asyncio.run(_seed(redis_server_url, key_prefix, entries, 4))
    assert (result.queued, result.duplicates, result.invalid_count) == (10, 4, 0)
    assert asyncio.run(_queued(redis_server_url, key_prefix)) == (10, 3)


def test_a_seeding_that_fails_part_way_keeps_its_batches_and_runs_again(
    redis_server_url: str, key_prefix: str
) -> None:
    entries = [f"https://s{i % 5}.example/{i}" for i in range(25)]

    def failing() -> Iterator[str]:
        yield from entries[:17]
        raise OSError("the input went away")

    with pytest.raises(OSError, match="went away"):
        asyncio.run(_seed(redis_server_url, key_prefix, failing(), 4))
    # the batches read before the failure (4 of 4 seeds) are queued; the 17th seed's
    # batch was never complete
    assert asyncio.run(_queued(redis_server_url, key_prefix)) == (16, 5)
    again = asyncio.run(_seed(redis_server_url, key_prefix, entries, 4))
    assert (again.queued, again.duplicates) == (9, 16)
    assert asyncio.run(_queued(redis_server_url, key_prefix)) == (25, 5)
