"""A small client of Scrapyd's JSON API (the calls the manager makes), and the choice of
the least-loaded Scrapyd nodes."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import httpx

from crawlfleet.state.scrapyd import ScrapydInfo

__all__ = ["Load", "ScrapydClient", "ScrapydError", "least_loaded", "loads", "log_levels"]

#: Seconds for one call to Scrapyd (an egg upload may take longer).
TIMEOUT_SECONDS = 10.0
UPLOAD_TIMEOUT_SECONDS = 120.0


class ScrapydError(Exception):
    """Scrapyd did not answer, or answered with an error (its message, no secret)."""


@dataclass
class Load:
    """What one Scrapyd is doing now."""

    name: str
    reachable: bool
    running: int = 0
    pending: int = 0
    node_name: str = ""
    #: summed CPU (100 = one core) of live crawlfleet nodes reporting from its host
    cpu_percent: float = 0.0
    error: str = ""
    chosen: int = field(default=0, compare=False)

    @property
    def score(self) -> float:
        """Lower is freer: its processes (running, pending, just chosen) and its CPU."""
        return self.running + self.pending + self.chosen + self.cpu_percent / 100.0


class ScrapydClient:
    def __init__(self, node: ScrapydInfo) -> None:
        self.node = node
        auth = (node.username, node.password or "") if node.username else None
        self.http = httpx.AsyncClient(base_url=node.url, auth=auth, timeout=TIMEOUT_SECONDS)

    async def __aenter__(self) -> ScrapydClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.http.aclose()

    def _unreachable(self, exc: Exception) -> ScrapydError:
        return ScrapydError(f"Scrapyd {self.node.name} unreachable ({type(exc).__name__})")

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ScrapydError(
                f"Scrapyd {self.node.name} unreachable ({type(exc).__name__})"
            ) from None
        if response.status_code == 401:
            raise ScrapydError(f"Scrapyd {self.node.name} refused the credentials (401)")
        try:
            body = response.json()
        except ValueError:
            raise ScrapydError(
                f"Scrapyd {self.node.name} answered {response.status_code} without JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "ok":
            message = body.get("message", "error") if isinstance(body, dict) else "error"
            raise ScrapydError(f"Scrapyd {self.node.name}: {' '.join(str(message).split())[:300]}")
        return body

    async def daemonstatus(self) -> dict[str, Any]:
        return await self._call("GET", "/daemonstatus.json")

    async def listprojects(self) -> list[str]:
        return [str(p) for p in (await self._call("GET", "/listprojects.json"))["projects"]]

    async def listspiders(self, project: str) -> list[str]:
        body = await self._call("GET", "/listspiders.json", params={"project": project})
        return [str(s) for s in body["spiders"]]

    async def listjobs(self, project: str | None = None) -> dict[str, Any]:
        return await self._call(
            "GET", "/listjobs.json", params={"project": project} if project else None
        )

    async def addversion(self, project: str, version: str, egg: bytes | BinaryIO) -> dict[str, Any]:
        return await self._call(
            "POST",
            "/addversion.json",
            data={"project": project, "version": version},
            files={"egg": ("project.egg", egg, "application/octet-stream")},
            timeout=UPLOAD_TIMEOUT_SECONDS,
        )

    async def schedule(
        self, project: str, spider: str, settings: dict[str, str], args: dict[str, str]
    ) -> str:
        data: dict[str, str | list[str]] = {**args, "project": project, "spider": spider}
        data["setting"] = [f"{k}={v}" for k, v in settings.items()]
        return str((await self._call("POST", "/schedule.json", data=data))["jobid"])

    async def cancel(self, project: str, job: str, signal: str) -> str | None:
        body = await self._call(
            "POST", "/cancel.json", data={"project": project, "job": job, "signal": signal}
        )
        return body.get("prevstate")

    async def status(self, project: str, job: str) -> str | None:
        """pending, running, finished, or None (Scrapyd does not know the job)."""
        body = await self._call("GET", "/status.json", params={"project": project, "job": job})
        return body.get("currstate")

    async def log(self, project: str, spider: str, job: str, tail_bytes: int) -> str:
        """The end of a process's log (at most *tail_bytes*; "" while there is none).
        Its size first, then a range from there (Twisted fails on a suffix range longer
        than the file)."""
        path = f"/logs/{project}/{spider}/{job}.log"
        try:
            head = await self.http.head(path)
            if head.status_code == 404:
                return ""
            size = int(head.headers.get("content-length", "0"))
            start = max(0, size - tail_bytes)
            response = await self.http.get(path, headers={"Range": f"bytes={start}-"})
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code == 404:
            return ""
        if response.status_code not in (200, 206):
            raise ScrapydError(f"Scrapyd {self.node.name}: log answered {response.status_code}")
        return response.content[-tail_bytes:].decode("utf-8", errors="replace")


async def loads(nodes: list[ScrapydInfo], cpu_by_host: dict[str, float]) -> list[Load]:
    """Each Scrapyd's load now (asked at once; an unreachable one says why)."""

    async def one(node: ScrapydInfo) -> Load:
        async with ScrapydClient(node) as client:
            try:
                status = await client.daemonstatus()
            except ScrapydError as exc:
                return Load(node.name, False, error=str(exc))
        host = str(status.get("node_name", ""))
        return Load(
            node.name,
            True,
            running=int(status.get("running", 0)),
            pending=int(status.get("pending", 0)),
            node_name=host,
            cpu_percent=cpu_by_host.get(host, 0.0),
        )

    return list(await asyncio.gather(*(one(n) for n in nodes)))


def least_loaded(loads: list[Load], count: int) -> list[str]:
    """*count* choices among the reachable Scrapyd nodes, each time the freest (a node
    chosen counts as one more process); ties go by name."""
    up = [load for load in loads if load.reachable]
    chosen = []
    for _ in range(count if up else 0):
        best = min(up, key=lambda load: (load.score, load.name))
        best.chosen += 1
        chosen.append(best.name)
    return chosen


_LEVEL = re.compile(r"\] (DEBUG|INFO|WARNING|ERROR|CRITICAL): ")


def log_levels(text: str) -> dict[str, int]:
    """Lines of a Scrapy log by level."""
    counts = Counter(m.group(1) for m in _LEVEL.finditer(text))
    return {
        level: counts.get(level, 0) for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    }
