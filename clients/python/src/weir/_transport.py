"""HTTP to the cluster: which node to ask, when a node is silent, what to retry.

# Any node is an entry point

Every node serves the whole API: a follower forwards a write or a read to the leader
through its own internal client and answers with the leader's answer (the caller sees no
redirect; 503 ``NoLeader`` while there is none). So this client keeps one *current* node
and sends everything there, moving to the next configured server when the current one
fails to connect, answers 503, or falls silent.

# A silent node versus a busy one (the Rust library's rule)

A node that stops answering while its process lives (SIGSTOP, a frozen VM) keeps its
sockets open: nothing fails, requests just wait. A short per-request timeout cannot tell
it from a busy node (a write through a follower during an election legitimately takes
over a second). So, like the Rust library, the client listens for *silence*: while any
request or event stream is open on a node, it asks that node's ``/healthz`` every
:data:`PROBE_EVERY` (200 ms). ``/healthz`` is answered by the HTTP server itself, without
the cluster, so a busy node answers it and a stopped one does not. A request whose node
has been heard from neither by its answer nor by a probe for :data:`SILENCE_MAX` (1 s) is
given up (a write's outcome is then unknown), the node is *suspected* and passed over for
:data:`SUSPECT_FOR` (3 s), and the request is sent to the next node at once (every write
is idempotent). A killed node refuses connections, which is seen at once.

# Retries

A request is tried at most :data:`ATTEMPTS_MAX` times within its deadline
(:data:`REQUEST_DEADLINE`, 10 s, below the 15 s for which the cluster remembers a finished
ticket, so a retried acquire is always answered as before). A refused connect moves on at
once (pausing after a full round of the servers); a 503 moves on after a jittered pause; a
broken or silent exchange moves on at once. A write that may have been applied on some
try and then ran out of tries is :class:`~weir.OutcomeUnknown`, never "failed".

# Hedging

:meth:`Transport.hedge` sends an idempotent request (a keep-alive, an acquire) to the
other nodes while the current one has not answered it, silent or not; the node that
answers becomes the current one (the session module says when a request is hedged).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx

from ._config import Settings
from ._version import __version__
from .errors import (
    OutcomeUnknown,
    ProtocolError,
    Unavailable,
    WeirError,
    from_response,
)

log = logging.getLogger("weir")

T = TypeVar("T")

#: A node heard from neither by an answer nor by a probe for this long is silent (s).
SILENCE_MAX = 1.0
#: How often a request in flight looks at its node's silence (s).
SILENCE_CHECK = 0.05
#: How often a node in use is probed (``GET /healthz``) (s).
PROBE_EVERY = 0.2
#: Longest one probe waits (s).
PROBE_TIMEOUT = 1.0
#: How long a silent node is passed over (s).
SUSPECT_FOR = 3.0
#: Pause between tries when a node cannot serve now (s), jittered 50-150 %.
RETRY_PAUSE = 0.1
#: Longest a request is retried for (s).
REQUEST_DEADLINE = 10.0
#: Most tries of one request.
ATTEMPTS_MAX = 200
#: Longest a TCP (and TLS) connect may take (s).
CONNECT_TIMEOUT = 2.0
#: Longest one try waits for its answer (s): a node answers within its own client's
#: 10 s deadline at worst.
RESPONSE_TIMEOUT = 15.0
#: Most tries of one hedge.
HEDGE_TRIES = 20


def jittered(pause: float) -> float:
    """``pause`` scaled by a factor in [0.5, 1.5): clients that lost their node at the same
    instant do not come back in step."""
    return pause * (0.5 + random.random())


class _Silent(Exception):
    """The node of a request fell silent."""


class Node:
    """One configured server and what the client knows of it."""

    def __init__(self, url: str, index: int) -> None:
        self.url = url
        self.index = index
        #: Passed over until then (monotonic).
        self.suspect_until = 0.0
        #: The last answer of any kind from it (monotonic).
        self.last_heard = 0.0
        #: Requests and streams open on it now.
        self.users = 0
        #: When ``users`` last went from 0 to 1 (monotonic).
        self.busy_since = 0.0
        self.prober: asyncio.Task[None] | None = None

    def suspected(self, now: float) -> bool:
        return now < self.suspect_until

    def heard(self) -> None:
        self.last_heard = time.monotonic()

    def __repr__(self) -> str:
        return f"Node({self.url})"


def _tls_failure(e: BaseException) -> bool:
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e, httpx.RemoteProtocolError):
        text += (
            " (is this the node's HTTP port, http_listen, and not its client port?"
            " Over TLS, is the CA given?)"
        )
    return text


def _json(resp: httpx.Response) -> Any:
    if not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


EventHandler = Callable[[str, str], None]


class Transport:
    """The nodes, their liveness, and requests with retries (module doc)."""

    def __init__(self, settings: Settings, request_deadline: float = REQUEST_DEADLINE) -> None:
        verify: ssl.SSLContext | bool = True
        if settings.ca is not None:
            verify = ssl.create_default_context(cafile=settings.ca)
        headers = {"User-Agent": f"weir-python/{__version__}"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        if settings.group is not None:
            # Every request, a session's above all, speaks to the client's group.
            headers["Weir-Group"] = str(settings.group)
        self.request_deadline = request_deadline
        self.nodes = [Node(u, i) for i, u in enumerate(settings.urls)]
        self._current = 0
        self._closed = False
        # trust_env=False: the cluster is reached directly, never through HTTP_PROXY.
        self._http = httpx.AsyncClient(
            verify=verify,
            headers=headers,
            timeout=httpx.Timeout(RESPONSE_TIMEOUT, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,
        )
        self._probe = httpx.AsyncClient(
            verify=verify,
            headers={"User-Agent": headers["User-Agent"]},
            timeout=httpx.Timeout(PROBE_TIMEOUT),
            trust_env=False,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- nodes -------------------------------------------------------------------------

    @property
    def current(self) -> Node:
        return self.nodes[self._current]

    def pick(self) -> Node:
        """The node to ask now: the current one, or the next not suspected."""
        now = time.monotonic()
        n = len(self.nodes)
        for k in range(n):
            node = self.nodes[(self._current + k) % n]
            if not node.suspected(now):
                self._current = node.index
                return node
        return self.nodes[self._current]

    def move_on(self, node: Node) -> None:
        """The next request goes elsewhere than ``node``."""
        if self._current == node.index:
            self._current = (node.index + 1) % len(self.nodes)

    def suspect(self, node: Node) -> None:
        node.suspect_until = time.monotonic() + SUSPECT_FOR
        self.move_on(node)
        log.info("weir: %s fell silent; passed over for %g s", node.url, SUSPECT_FOR)

    def _enter(self, node: Node) -> None:
        node.users += 1
        if node.users == 1:
            node.busy_since = time.monotonic()
        if node.prober is None or node.prober.done():
            node.prober = asyncio.ensure_future(self._probe_loop(node))

    def _leave(self, node: Node) -> None:
        node.users -= 1

    async def _probe_loop(self, node: Node) -> None:
        while node.users > 0 and not self._closed:
            try:
                await self._probe.get(node.url + "/healthz")
                node.heard()
            except (httpx.HTTPError, OSError):
                pass
            await asyncio.sleep(PROBE_EVERY)

    async def _watched(self, node: Node, work: Awaitable[T]) -> T:
        """Runs ``work`` against ``node``, giving it up if the node falls silent."""
        task = asyncio.ensure_future(work)
        start = time.monotonic()
        self._enter(node)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=SILENCE_CHECK)
                if done:
                    return task.result()
                if time.monotonic() - max(node.last_heard, start) > SILENCE_MAX:
                    task.cancel()
                    await asyncio.wait({task}, timeout=1.0)
                    if task.done() and not task.cancelled():
                        task.exception()  # retrieved: the try is given up anyway
                    self.suspect(node)
                    raise _Silent(node.url)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self._leave(node)

    # -- requests ----------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> Any:
        """Sends one request to the cluster with retries; returns the JSON answer of a
        2xx, raises the typed error of any other (module doc)."""
        _status, answer = await self.call_status(method, path, body, deadline=deadline)
        return answer

    async def call_status(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> tuple[int, Any]:
        """:meth:`call`, with the status code of the answer."""
        write = method != "GET"
        started = time.monotonic()
        limit = self.request_deadline if deadline is None else deadline
        maybe_applied = False
        last: WeirError | None = None
        connects_failed = 0
        for _ in range(ATTEMPTS_MAX):
            if self._closed:
                raise Unavailable("the client is closed")
            if time.monotonic() - started > limit:
                break
            node = self.pick()
            try:
                resp = await self._watched(
                    node, self._http.request(method, node.url + path, json=body)
                )
            except _Silent:
                maybe_applied |= write
                last = Unavailable(f"{node.url} fell silent for {SILENCE_MAX:g} s")
                continue
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                if _tls_failure(e):
                    raise ProtocolError(f"{node.url}: TLS verification failed: {e}") from e
                last = Unavailable(f"{node.url}: {_describe(e)}")
                self.move_on(node)
                connects_failed += 1
                if connects_failed % len(self.nodes) == 0:
                    await asyncio.sleep(jittered(RETRY_PAUSE))
                continue
            except httpx.TransportError as e:
                maybe_applied |= write
                last = Unavailable(f"{node.url}: {_describe(e)}")
                self.move_on(node)
                continue
            node.heard()
            answer = _json(resp)
            if resp.status_code == 503:
                err = from_response(resp.status_code, answer)
                maybe_applied |= write and isinstance(err, OutcomeUnknown)
                last = err
                self.move_on(node)
                await asyncio.sleep(jittered(RETRY_PAUSE))
                continue
            if resp.status_code >= 400:
                raise from_response(resp.status_code, answer, resp.headers.get("retry-after"))
            if answer is None and resp.status_code != 204:
                raise ProtocolError(f"{node.url}{path}: answer is not JSON")
            return resp.status_code, answer
        why = last.message if last is not None else f"none of {[n.url for n in self.nodes]}"
        if maybe_applied and write:
            raise OutcomeUnknown(f"{method} {path}: may have been applied: {why}")
        if isinstance(last, WeirError):
            raise last
        raise Unavailable(why)

    async def hedge(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Sends an idempotent request to the nodes other than the current one, in turn;
        the node that answers committed it, so it leads: it becomes the current one, and the
        one that did not answer is passed over for :data:`SUSPECT_FOR`."""
        avoid = self.current
        others = [n for n in self.nodes if n is not avoid]
        if not others:
            raise Unavailable("no other node to hedge to")
        last: WeirError = Unavailable("no other node answered the hedge")
        for attempt in range(HEDGE_TRIES):
            if self._closed:
                raise Unavailable("the client is closed")
            node = others[attempt % len(others)]
            try:
                resp = await self._watched(
                    node, self._http.request(method, node.url + path, json=body)
                )
            except _Silent:
                last = Unavailable(f"{node.url} fell silent")
                continue
            except httpx.TransportError as e:
                last = Unavailable(f"{node.url}: {_describe(e)}")
                if (attempt + 1) % len(others) == 0:
                    await asyncio.sleep(jittered(RETRY_PAUSE))
                continue
            node.heard()
            answer = _json(resp)
            if resp.status_code == 503:
                last = from_response(resp.status_code, answer)
                await asyncio.sleep(jittered(RETRY_PAUSE))
                continue
            if resp.status_code >= 400:
                raise from_response(resp.status_code, answer, resp.headers.get("retry-after"))
            self._adopt(node, avoid)
            return answer
        raise last

    def _adopt(self, node: Node, old: Node) -> None:
        if self.current is old:
            old.suspect_until = time.monotonic() + SUSPECT_FOR
            self._current = node.index
            log.info("weir: hedged request answered by %s; moving there", node.url)

    async def stream(
        self,
        path: str,
        on_open: Callable[[], None],
        on_event: EventHandler,
    ) -> None:
        """Follows the server-sent events at ``path`` on the current node until the stream
        ends. ``on_open`` runs once the node answered 200 (the server subscribes before it
        answers, so no event after that is missed); ``on_event(name, data)`` per event.
        Raises :class:`~weir.Unavailable` when the node cannot be reached or falls silent,
        and the typed error of an error answer."""
        if self._closed:
            raise Unavailable("the client is closed")
        node = self.pick()

        async def follow() -> None:
            request = self._http.build_request(
                "GET",
                node.url + path,
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT),
            )
            resp = await self._http.send(request, stream=True)
            try:
                node.heard()
                if resp.status_code >= 400:
                    await resp.aread()
                    raise from_response(resp.status_code, _json(resp))
                on_open()
                name, data = "message", list[str]()
                async for line in resp.aiter_lines():
                    node.heard()
                    if line == "":
                        if data:
                            on_event(name, "\n".join(data))
                        name, data = "message", []
                        continue
                    if line.startswith(":"):
                        continue
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event":
                        name = value
                    elif field == "data":
                        data.append(value)
            finally:
                await resp.aclose()

        try:
            await self._watched(node, follow())
        except _Silent as e:
            raise Unavailable(f"{node.url}: event stream fell silent") from e
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            if _tls_failure(e):
                raise ProtocolError(f"{node.url}: TLS verification failed: {e}") from e
            self.move_on(node)
            raise Unavailable(f"{node.url}: {_describe(e)}") from e
        except httpx.TransportError as e:
            self.move_on(node)
            raise Unavailable(f"{node.url}: {_describe(e)}") from e
        except Unavailable:
            self.move_on(node)
            raise

    async def aclose(self) -> None:
        self._closed = True
        for node in self.nodes:
            if node.prober is not None:
                node.prober.cancel()
        await self._http.aclose()
        await self._probe.aclose()
