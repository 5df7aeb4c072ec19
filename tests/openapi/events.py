"""The event streams against docs/openapi.yaml: every event a session's live stream sends has
a name the document lists under the stream's `x-events` and data valid against that event's
schema, and a session that is granted, halted, refused and expires sees each of those; the
cluster's stream (`GET /v1/events`, which never ends, so schemathesis leaves it to this
script) is `text/event-stream`, opens with `hello` {node, group, leader, term}, and carries the same
activity with the fields its summary in the document lists.

Usage: python events.py BASE_URL (a node with no tokens; run by tests/openapi/run.sh).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
STREAM_SECONDS_MAX = 20.0


def event_schemas() -> dict[str, Any]:
    doc = yaml.safe_load(DOC.read_text())
    ok = doc["paths"]["/v1/sessions/{session}/events"]["get"]["responses"]["200"]
    schemas = doc["components"]["schemas"]
    return {
        name: schemas[ref["$ref"].rsplit("/", 1)[1]]
        for name, ref in ok["x-events"].items()
        if isinstance(ref, dict) and "$ref" in ref
    }


# The cluster stream's events this script causes, with the fields the document's summary of
# `GET /v1/events` gives each.
CLUSTER_FIELDS = {
    "hello": {"node", "group", "leader", "term"},
    "defined": {"kind", "tenant", "limit"},
    "granted": {"kind", "tenant", "limit", "session", "ticket", "fence", "units", "queued"},
    "queued": {"kind", "tenant", "limit", "session", "ticket", "position"},
    "released": {"kind", "tenant", "limit", "session", "ticket", "held"},
    "halt_set": {"kind", "tenant", "scope", "reason"},
    "expired": {"kind", "session"},
}


async def read_stream(http: httpx.AsyncClient, path: str, seen: list[tuple[str, Any]],
                      started: asyncio.Event, content_type: list[str]) -> None:
    """Reads the server-sent events of `path` into `seen` as (name, data) until it ends;
    records the stream's content type and sets `started` once the stream is open."""
    async with http.stream("GET", path, timeout=None) as r:
        r.raise_for_status()
        content_type.append(r.headers.get("content-type", ""))
        started.set()
        name = None
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:") and name is not None:
                seen.append((name, json.loads(line[len("data:"):])))
                name = None


def check_cluster(seen: list[tuple[str, Any]], content_type: list[str]) -> list[str]:
    failures = []
    if not content_type or not content_type[0].startswith("text/event-stream"):
        failures.append(f"GET /v1/events answered content type {content_type}")
    if not seen or seen[0][0] != "hello":
        failures.append(f"GET /v1/events did not open with hello: {seen[:1]}")
    for name, data in seen:
        want = CLUSTER_FIELDS.get(name)
        if want is None:
            continue
        if not isinstance(data, dict) or not want <= data.keys():
            missing = sorted(want - data.keys()) if isinstance(data, dict) else sorted(want)
            failures.append(f"cluster event {name!r} {data} lacks fields {missing}")
    names = {name for name, _ in seen}
    for needed in CLUSTER_FIELDS:
        if needed not in names:
            failures.append(f"no {needed!r} event on GET /v1/events (saw {sorted(names)})")
    return failures


async def call(http: httpx.AsyncClient, method: str, path: str, body: Any = None) -> Any:
    r = await http.request(method, path, json=body)
    assert r.status_code < 500, f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


async def drive(base: str) -> tuple[list[tuple[str, Any]], list[str]]:
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        cluster: list[tuple[str, Any]] = []
        content_type: list[str] = []
        cluster_started = asyncio.Event()
        watcher = asyncio.create_task(
            read_stream(http, "/v1/events", cluster, cluster_started, content_type))
        await asyncio.wait_for(cluster_started.wait(), 10)
        await call(http, "PUT", "/v1/tenants/ev/limits/one", {"concurrent": 1})
        session = (await call(http, "POST", "/v1/sessions", {"ttl_ms": 1500}))["session"]
        seen: list[tuple[str, Any]] = []
        started = asyncio.Event()
        reader = asyncio.create_task(
            read_stream(http, f"/v1/sessions/{session}/events", seen, started, []))
        await asyncio.wait_for(started.wait(), 10)
        acquire = "/v1/tenants/ev/limits/one/acquire"
        base_body = {"session": session, "timeout_ms": 0}
        await call(http, "POST", acquire, {**base_body, "ticket": 1})
        await call(http, "POST", acquire, {**base_body, "ticket": 2})  # queued
        await call(http, "POST", f"/v1/sessions/{session}/release", {"ticket": 1})  # granted
        await call(http, "POST", acquire, {**base_body, "ticket": 3})  # queued
        await call(http, "PUT", "/v1/tenants/ev/halt", {"reason": "drill"})  # halted, refused
        # No keep-alive: the session expires and the stream ends after its last event.
        await asyncio.wait_for(reader, STREAM_SECONDS_MAX)
        # The cluster stream sees the expiry too, through its own subscription, which may
        # deliver it a little after the session's stream ended: wait for it (bounded), then
        # stop the stream, which never ends on its own.
        for _ in range(100):
            if any(name == "expired" for name, _ in cluster):
                break
            await asyncio.sleep(0.1)
        watcher.cancel()
        try:
            await watcher
        except asyncio.CancelledError:
            pass
        return seen, check_cluster(cluster, content_type)


def main() -> int:
    schemas = event_schemas()
    seen, failures = asyncio.run(drive(sys.argv[1]))
    for name, data in seen:
        if name not in schemas:
            failures.append(f"event {name!r} is not documented: {data}")
            continue
        for error in jsonschema_rs.validator_for(schemas[name]).iter_errors(data):
            failures.append(f"event {name!r} {data} does not match its schema: {error}")
    names = {name for name, _ in seen}
    for needed in ("granted", "halted", "refused", "expired"):
        if needed not in names:
            failures.append(f"no {needed!r} event was seen (saw {sorted(names)})")
    for f in failures:
        print(f"events: {f}")
    print(f"events: {len(seen)} session events and the cluster stream checked against docs/openapi.yaml, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
