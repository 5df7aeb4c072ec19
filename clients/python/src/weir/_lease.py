"""Token leases held by a session (:meth:`AsyncSession.lease`, :class:`AsyncLease`): a share
of a rate limit (or of one key of a keyed limit) spent locally, without a request per take.

The rules and why they keep G1 are the cluster's ("Token leases" in the machine's module
doc); this module is the holder's half of them, as the Rust library's ``leased.rs`` is.

# The local bucket

A lease keeps a bucket of its own: its size is the lease's cap, it starts with the tokens
the cluster moved to it, and it refills at the lease's rate on :func:`weir.boot_now`'s
clock from the moment a reply is in hand (never from when the request was sent: the
cluster lowered its own refill only when it applied the entry). :meth:`AsyncLease.try_take`
decides from it alone, and only while the session's belief deadline holds (the G2 rule:
the send time of the last acknowledged keep-alive plus the TTL, less the margin). Past the
deadline the bucket is emptied and nothing is spent locally until a keep-alive is
acknowledged again; once the session has ended (closed or expired), the lease has ended
(:meth:`AsyncLease.end`) or a renewal was refused (a halt of the tenant, a removed limit),
it never spends again. Then every :meth:`AsyncLease.take` asks the cluster, one take as
:meth:`AsyncClient.take` sends, and :meth:`AsyncLease.try_take` answers ``False``.

# Renewals: shares follow demand, decreases at once, increases on the reply

A task renews the lease every keep-alive period (TTL/5), and sooner (after an eighth of
the period) when a take found the bucket short: it asks for a rate of one and a half times
what was taken since the last renewal (at least an eighth of the rate asked at the open,
at most that rate), all of it after a short take, and the cap asked at the open; both at
most the fair share the last reply advised when the lease stands above it. A decrease
applies here *when the request is sent* (the rate at once, the level down to the new cap,
the excess given back in the request); an increase only when the reply arrives. A request
whose outcome is unknown keeps the decreases and gains nothing; a retry is harmless (its
``seq``, the session's lease request counter, is not above the last applied). A session
sends one lease request at a time, so its requests are applied in the order of their
``seq``. So the holder's share is never larger than the cluster counts it.

# The opt-in on existing takes

:meth:`AsyncClient.take` takes ``lease=``: the take is decided by that lease when it has
the tokens, and sent to the cluster as before when it has not (a lease is of one limit or
key, so a take with ``parts`` or an ``agent`` cannot name one). :meth:`AsyncLease.take` is
the same call.

# Threads

The blocking API's :meth:`Lease.try_take <weir.Lease.try_take>` runs in the caller's thread
(no hop to the client's loop): the bucket is guarded by a lock, and a short take wakes the
renewal through the loop's thread-safe call.

# Ending

:meth:`AsyncLease.end` gives the lease up, returning the bucket's tokens; leaving an
``async with`` block ends it the same way. A lease not ended ends with its session, and what
it held is counted as spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ._clock import KEEPALIVES_PER_TTL, believed_at, boot_now
from ._opening import Opening
from ._transport import Transport
from .errors import Busy, ProtocolError, Refused, UnknownSession, WeirError, name_part
from .types import LOST_EXPIRED, Part

if TYPE_CHECKING:
    from ._session import AsyncSession

log = logging.getLogger("weir")

#: Micro-tokens per token.
MICRO = 1_000_000


def _q(segment: str) -> str:
    return quote(segment, safe="")


async def take_from_cluster(
    transport: Transport,
    tenant: str,
    name: str,
    units: int,
    *,
    agent: str | None = None,
    wait: float | None = None,
    key: str | None = None,
    parts: list[Part] | None = None,
) -> int | None:
    """One take decided by the cluster (:meth:`AsyncClient.take`'s rules): the tokens left
    for one keyless limit, ``None`` for a key or several parts; :class:`~weir.Busy` when
    there is no room (retried while ``retry_after`` stays within ``wait`` seconds)."""
    body: dict[str, Any] = {"units": units}
    if key is not None:
        body["key"] = key
    if parts:
        body["parts"] = [p.to_json() for p in parts]
    if agent is not None:
        body["agent"] = agent
    asked = (Part(name, units, key), *(parts or ()))
    path = f"/v1/tenants/{_q(tenant)}/limits/{_q(name)}/take"
    started = time.monotonic()
    while True:
        try:
            answer = await transport.call("POST", path, body)
        except Refused as refused:
            name_part(refused, asked)
            if not isinstance(refused, Busy):
                raise
            after = refused.retry_after
            if wait is None or after is None:
                raise
            if time.monotonic() - started + after > wait:
                raise
            await asyncio.sleep(after)
            continue
        if not isinstance(answer, dict):
            raise ProtocolError(f"take answered {answer!r}")
        remaining = answer.get("remaining")
        return None if remaining is None else int(remaining)


@dataclass(frozen=True)
class LeaseFigures:
    """What a lease did, for diagnostics and tests."""

    #: Takes decided from the local bucket.
    local: int = 0
    #: Takes the local bucket could not cover (they fell back to the cluster or failed).
    short: int = 0
    #: Takes sent to the cluster by :meth:`AsyncLease.take`.
    cluster: int = 0
    #: Lease requests sent: the first, the renewals and the end.
    requests: int = 0
    #: The share now: refill (micro-tokens a second) and bucket size (tokens).
    rate_micro_per_s: int = 0
    cap: int = 0
    #: Micro-tokens in the local bucket at its last refill.
    level_micro: int = 0


class AsyncLease:
    """A token lease on one limit (or key), held by a session: takes decided locally while
    it has tokens and the session's belief holds (module doc). Open one with
    :meth:`AsyncSession.lease`."""

    def __init__(
        self,
        session: AsyncSession,
        tenant: str,
        limit: str,
        key: str | None,
        rate_per_s: float,
        cap: int,
    ) -> None:
        if not rate_per_s > 0:
            raise ValueError("rate_per_s must be above 0 tokens a second")
        if cap < 1:
            raise ValueError("cap must be at least 1 token")
        self.tenant = tenant
        self.limit = limit
        self.key = key
        #: What the lease asks at most: refill (tokens a second) and bucket size (tokens).
        self.rate_per_s = rate_per_s
        self.cap = cap
        self._session = session
        self._want_rate = int(rate_per_s * MICRO)
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        # The local bucket and the share it stands at.
        self._rate = 0
        self._cap = 0
        self._level = 0
        self._remainder = 0.0
        self._refilled_at = boot_now()
        #: Units taken locally since the last request was sent.
        self._taken = 0
        self._fair_rate = self._want_rate
        self._fair_cap = cap
        self._ended: str | None = None
        self._local = self._short = self._cluster = self._requests = 0
        self._short_wake = asyncio.Event()
        self._renewal: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        key = "" if self.key is None else f"@{self.key}"
        return f"AsyncLease({self.tenant}/{self.limit}{key}, ended={self._ended!r})"

    # -- what callers read ---------------------------------------------------------------

    @property
    def figures(self) -> LeaseFigures:
        """The lease's figures now."""
        with self._lock:
            return LeaseFigures(self._local, self._short, self._cluster, self._requests,
                                self._rate, self._cap, self._level)

    @property
    def ended(self) -> str | None:
        """Why the lease no longer spends locally (ended, refused, its session's end), or
        ``None`` while it may."""
        return self._ended

    def check_covers(self, tenant: str, limit: str, key: str | None,
                     parts: list[Part] | None, agent: str | None) -> None:
        """Raises ``ValueError`` unless a take of ``tenant``/``limit`` (and ``key``) with
        these ``parts`` and ``agent`` may use this lease."""
        if parts or agent is not None:
            raise ValueError("a leased take names no parts and no agent")
        if (self.tenant, self.limit, self.key) != (tenant, limit, key):
            raise ValueError(f"{self!r} is not a lease of {tenant}/{limit} key {key!r}")

    # -- takes ---------------------------------------------------------------------------

    def try_take(self, units: int = 1) -> bool:
        """Takes ``units`` from the local bucket if it has them and the session's belief
        holds: no network, no wait. ``False`` means this lease cannot cover them now (ask
        the cluster with :meth:`take`, or try again after the refill)."""
        if units < 1:
            raise ValueError("units must be at least 1")
        s = self._session
        now = boot_now()
        with self._lock:
            if s._ended is not None or not believed_at(s._deadline, now):
                # Past the belief deadline, or the session ended (its close ended the lease
                # on the cluster when it was sent): nothing more is spent here.
                self._level = 0
                self._short += 1
                return False
            if self._ended is not None:
                self._short += 1
                return False
            self._refill(now)
            need = units * MICRO
            if self._level >= need:
                self._level -= need
                self._taken += units
                self._local += 1
                return True
            self._short += 1
        self._wake_renewal()
        return False

    async def take(self, units: int = 1, *, wait: float | None = None) -> int | None:
        """Takes ``units``: from the local bucket when it has them (answers ``None``), else
        one take decided by the cluster, as :meth:`AsyncClient.take` (answers the tokens it
        has left; :class:`~weir.Busy` when it has no room, retried within ``wait``)."""
        if self.try_take(units):
            return None
        return await self._ask_cluster(units, wait)

    async def _ask_cluster(self, units: int, wait: float | None) -> int | None:
        with self._lock:
            self._cluster += 1
        return await take_from_cluster(
            self._session._transport, self.tenant, self.limit, units, wait=wait, key=self.key
        )

    # -- the bucket (under the lock) -----------------------------------------------------

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._refilled_at)
        self._refilled_at = now
        scaled = self._rate * elapsed + self._remainder
        added = int(scaled)
        top = self._cap * MICRO
        if self._level + added >= top:
            self._level = top
            self._remainder = 0.0
        else:
            self._level += added
            self._remainder = scaled - added

    def _lower_to(self, rate: int, cap: int, now: float) -> int:
        """Lowers the share to (``rate``, ``cap``) where it is above them, at once; returns
        the micro-tokens the lower cap leaves over, which the request gives back."""
        self._refill(now)
        self._rate = min(self._rate, rate)
        self._cap = min(self._cap, cap)
        kept = min(self._level, self._cap * MICRO)
        returned = self._level - kept
        self._level = kept
        return returned

    def _adopt(self, share: dict[str, Any], now: float) -> None:
        """The cluster's answer, arrived at ``now``: the share it stands at and the tokens it
        moved here."""
        # Refilled at the old rate up to now; the new one counts from now.
        self._refill(now)
        self._rate = int(share["rate_micro_per_s"])
        self._cap = int(share["cap"])
        self._level = min(self._level + int(share["tokens_micro"]), self._cap * MICRO)
        self._fair_rate = int(share["fair_rate_micro_per_s"])
        self._fair_cap = int(share["fair_cap"])

    def _stop(self, why: str) -> None:
        """Stops spending locally, for good."""
        with self._lock:
            self._level = 0
            self._rate = 0
            if self._ended is None:
                self._ended = why
        self._wake_renewal()

    def _wake_renewal(self) -> None:
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            here = False
        if here:
            self._short_wake.set()
        elif not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._short_wake.set)

    # -- requests ------------------------------------------------------------------------

    async def _request(self, rate: int, cap: int) -> None:
        """Sends one lease request asking (``rate``, ``cap``): lowers the share at once
        where asked lower, and takes the answer in. A refusal stops the lease and is
        raised; any other error leaves the decreases made and nothing gained."""
        s = self._session
        # One lease request of the session at a time, so each is applied in the order of
        # its seq: a later seq applied first would make this one a duplicate, which
        # changes nothing (an end that did not end).
        async with s._lease_lock:
            s._lease_seq += 1
            seq = s._lease_seq
            with self._lock:
                self._taken = 0
                self._requests += 1
                returned = self._lower_to(rate, cap, boot_now())
            part: dict[str, Any] = {"limit": self.limit, "rate_micro_per_s": rate, "cap": cap,
                                    "returned_micro": returned}
            if self.key is not None:
                part["key"] = self.key
            body = {"session": s.id, "seq": seq, "parts": [part]}
            try:
                answer = await s._transport.call(
                    "POST", f"/v1/tenants/{_q(self.tenant)}/leases", body)
            except UnknownSession as e:
                self._stop(f"session {s.id} is gone: {e}")
                s._end(LOST_EXPIRED)
                raise
            except Refused as e:
                self._stop(f"lease of {self.tenant}/{self.limit} refused: {e}")
                raise
        now = boot_now()
        parts = answer.get("parts") if isinstance(answer, dict) else None
        if (not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict)
                or answer.get("status") != "leased"):
            raise ProtocolError(f"lease request answered {answer!r}")
        with self._lock:
            if self._ended is None:
                self._adopt(parts[0], now)

    async def _open(self) -> None:
        await self._request(self._want_rate, self.cap)
        self._renewal = asyncio.ensure_future(self._renew())
        self._session._background.add(self._renewal)
        self._renewal.add_done_callback(self._session._background.discard)

    def _ask(self, taken: int, elapsed: float, woken: bool) -> tuple[int, int]:
        """What a renewal asks after ``taken`` units in ``elapsed`` seconds (all the rate
        after a short take), at most the fair share when the lease stands above it."""
        want = self._want_rate
        demand = int(taken * MICRO / max(elapsed, 0.001))
        rate = want if woken else max(want // 8, min(want, demand + demand // 2))
        cap = self.cap
        if self._rate > self._fair_rate:
            rate = min(rate, self._fair_rate)
        if self._cap > self._fair_cap:
            cap = min(cap, self._fair_cap)
        return rate, cap

    async def _renew(self) -> None:
        """Renews the lease while it and its session live: every keep-alive period, or
        sooner when a take found the bucket short."""
        s = self._session
        period = s.ttl / KEEPALIVES_PER_TTL
        last = boot_now()
        while self._ended is None and s._ended is None:
            woken = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._short_wake.wait(), period)
                woken = True
            self._short_wake.clear()
            if woken:
                # A short bucket renews early, but not more than every period / 8.
                await asyncio.sleep(period / 8)
            if self._ended is not None or s._ended is not None:
                return
            now = boot_now()
            with self._lock:
                ask = self._ask(self._taken, now - last, woken)
            last = now
            try:
                await self._request(*ask)
            except Refused:
                return  # the lease stopped (a halt, a removed limit, the session's end)
            except WeirError as e:
                log.info("weir: renewal of the lease of %s/%s: %s", self.tenant, self.limit, e)
                await asyncio.sleep(period / 4)

    # -- the end -------------------------------------------------------------------------

    async def end(self) -> None:
        """Gives the lease up: the local bucket stops at once and its tokens go back.
        Nothing is sent when the lease had already stopped (its session's end ended it on
        the cluster). Raises if the cluster did not confirm it (the lease then ends with
        the session, what it held counted as spent)."""
        self._session._leases.discard(self)
        if self._renewal is not None:
            self._renewal.cancel()
        if self._ended is not None:
            return
        try:
            await self._request(0, 0)
        finally:
            self._stop("ended")

    async def _end_on_exit(self) -> None:
        try:
            await self.end()
        except WeirError as e:
            log.warning("weir: end of the lease of %s/%s: %s (it ends with its session)",
                        self.tenant, self.limit, e)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._end_on_exit()


class LeaseOpener(Opening[AsyncLease]):
    """What :meth:`AsyncSession.lease` returns: await it for a lease (end it yourself), or
    use it as ``async with`` (ended on exit)."""

    def __init__(self, open_: Callable[[], Awaitable[AsyncLease]]) -> None:
        super().__init__(open_, lambda lease, *exc: lease._end_on_exit())


__all__ = ["AsyncLease", "LeaseFigures", "LeaseOpener", "take_from_cluster"]
