"""The hedge rule without a cluster: two scripted nodes behind httpx's mock transport.

Node ``a`` opened the session and then holds every keep-alive without an answer while it
goes on answering ``/healthz`` (a follower whose forward waits on a dead leader, a leader
cut from its peers): to the transport it is never silent. Node ``b`` answers. The session
(TTL 3 s) must hedge its keep-alives to ``b`` and keep its belief."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

import weir
from weir._config import Settings
from weir._session import AsyncSession
from weir._transport import Transport


class _Held(httpx.AsyncByteStream):
    """An event stream that sends nothing and stays open."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(3600)
        yield b""


def _nodes(hold: asyncio.Event, seen: list[str]) -> httpx.MockTransport:
    async def handle(request: httpx.Request) -> httpx.Response:
        node, path = request.url.host, request.url.path
        seen.append(f"{node} {request.method} {path}")
        if path == "/healthz":
            return httpx.Response(200, text="ok")
        if path.endswith("/events"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=_Held())
        if path == "/v1/sessions":
            return httpx.Response(200, json={"session": 7, "ttl_ms": 3000})
        if path.endswith("/keepalive"):
            if node == "a.test" and hold.is_set():
                await asyncio.sleep(60)
            return httpx.Response(200, json={"status": "kept_alive", "ttl_ms": 3000})
        return httpx.Response(404, content=json.dumps({"error": "NotFound"}).encode())

    return httpx.MockTransport(handle)


async def test_a_keep_alive_held_by_a_node_that_answers_probes_is_hedged() -> None:
    hold = asyncio.Event()
    seen: list[str] = []
    settings = Settings(urls=("http://a.test", "http://b.test"), ca=None, token=None,
                        tenant="default")
    transport = Transport(settings)
    mock = _nodes(hold, seen)
    transport._http = httpx.AsyncClient(transport=mock)
    transport._probe = httpx.AsyncClient(transport=mock)
    session = await AsyncSession.open(transport, 3.0, "default")
    try:
        await asyncio.sleep(1.0)
        assert transport.current.url == "http://a.test"
        hold.set()
        await asyncio.sleep(6.0)  # two TTLs: without the hedge the belief ends in one
        assert session.ended is None
        assert weir.boot_now() < session.deadline, "the belief outlived the held keep-alives"
        assert session.writes_hedged >= 1 and session.keepalives_hedged >= 1
        assert transport.current.url == "http://b.test", "moved to the node that answered"
        at_b = [s for s in seen if s.startswith("b.test POST") and s.endswith("/keepalive")]
        assert len(at_b) >= 5, at_b
    finally:
        for task in session._tasks:
            task.cancel()
        await transport.aclose()
