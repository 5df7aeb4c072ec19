"""Sessions and permits (asyncio).

# Keep-alive and the belief deadline (G2)

A session sends a keep-alive every TTL/5 from a task of its own. When one is
acknowledged, the session's **belief deadline** becomes ``send time + TTL - margin``
(margin: a tenth of the TTL, at least 100 ms) on CLOCK_BOOTTIME where the platform has it,
else the monotonic clock (``_clock.py``). The cluster cannot expire the session before
``send time + TTL`` (its log clock never runs faster than real time), so every permit of
the session is believed held only until that deadline. A keep-alive with no
acknowledgement leaves the deadline where it was and is tried again after 100 ms; once the
deadline passes, every held permit is lost (:attr:`LostKind.DEADLINE`), and stays lost.
A keep-alive answered ``UnknownSession`` ends the session (:attr:`LostKind.EXPIRED`).

A keep-alive or an acquire that has gone unanswered for 400 ms while less than 1.6 s of
the belief is left is *hedged*: sent to the other nodes too, whether or not its node
answers probes (a node that heartbeats but holds requests, a follower whose forward waits
on a dead leader, is as bad as a silent one); the node that answers becomes the client's
current node. Both are idempotent (a keep-alive by its session, an acquire by its
ticket), so the copy costs only a request. The rule is the Rust library's (its
``hedge.rs`` argues the budget) and lives in one place here, :meth:`AsyncSession._hedged`.

# Grants, refusals, halts: the event stream

Each session follows its events (``GET /v1/sessions/{id}/events``, server-sent events)
from a task of its own. An acquire registers its ticket as waiting *before* it is sent,
then sends it with ``timeout_ms = 0``: answered ``granted`` it is a permit at once;
answered ``queued``, its grant (or refusal) comes on the event stream. Every time the
stream (re)connects, and whenever the node says it ``lagged``, the session asks again for
every waiting ticket with the very same request (idempotent by session and ticket: a
ticket granted meanwhile answers ``granted`` with the same fence), and reads the halts of
every tenant it holds permits of, so a grant or a halt whose event was lost is learned
anyway. A ``refused`` event is followed by one more ask of that ticket, which answers
the refusal with its fields (``Halted.scope``, ...).

# Keys, parts and held costs

An acquire names the key of a keyed limit (``key=``) and more limits of its tenant
(``parts=``), all decided in one entry: granted under one fence, or refused with nothing
charged (the refusal names the part, :attr:`Refused.part`). With ``estimate=True`` the
units of the rate parts are an estimate: the ticket stays live after its grant, holding
what it took, until :meth:`AsyncPermit.settle` names the actual cost (idempotent by
ticket); released unsettled, or ended with its session, the estimate stands as charged.

# A ticket asked for again while held

A caller may ask again itself for a ticket the session holds (``acquire(..., ticket=N)``,
for drivers and recovery tools): the cluster answers the same grant (same fence, nothing
charged twice), and the new permit joins the held one's holding (``_Held.twins``), so the
two are one holding: a halt, the deadline or the session's end tells both, and releasing
either releases the ticket and tells the others :attr:`LostKind.RELEASED`. A re-ask
registers nothing, so one that fails leaves the ticket with the permit that holds it; one
after the ticket was released is refused :class:`~weir.TicketReleased`. No permit is
believed held on a ticket another one released.

# Token leases

:meth:`AsyncSession.lease` opens a token lease of the session (``_lease.py``): its local
takes stop at the same belief deadline as the permits, and every lease stops for good when
the session ends (its close or expiry ended the leases on the cluster). The session keeps
the lease request counter (``seq``) all its leases share.

# Nothing stays held that no one believes it holds

A ticket that leaves the session without a permit owning it (its acquire's outcome
unknown, timed out, or cancelled) is released in the background. A release whose outcome
is unknown is retried (every second) until it is known or the session has ended (closing
or expiring frees everything the session holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

from ._clock import KEEPALIVES_PER_TTL, LOOK_EVERY, boot_now, deadline_after
from ._lease import AsyncLease, LeaseOpener
from ._opening import Opening
from ._planted import is_on as _planted
from ._transport import Transport, jittered
from .errors import (
    Forbidden,
    ProtocolError,
    Refused,
    SessionLost,
    TicketReleased,
    TimedOut,
    Unauthenticated,
    UnknownSession,
    WeirError,
    name_part,
    refusal,
)
from .types import (
    LOST_CLOSED,
    LOST_DEADLINE,
    LOST_EXPIRED,
    LOST_RELEASED,
    CostSettlement,
    Halt,
    HaltScope,
    Lost,
    LostKind,
    Part,
    Priority,
)

log = logging.getLogger("weir")

#: How soon a keep-alive that got no acknowledgement is tried again (or TTL/5, if sooner).
KEEPALIVE_RETRY = 0.1
#: How often an unanswered keep-alive or acquire looks whether it should be hedged.
HEDGE_LOOK = 0.05
#: A write is hedged only when less than this is left of the belief (s).
HEDGE_WHEN_LEFT = 1.6
#: ... and only once it has gone unanswered this long (s).
HEDGE_AFTER = 0.4
#: Pause between the tries of a background release (s).
RELEASE_PAUSE = 1.0
#: Pause before the event stream is opened again after it failed (s), jittered.
STREAM_PAUSE = 0.2


def q(segment: str) -> str:
    """A path segment, percent-encoded."""
    return quote(segment, safe="")


@dataclass
class _Held:
    """A granted ticket: which halts cover it, and why it may be lost."""

    tenant: str
    agent: str | None
    lost: Lost | None
    changed: asyncio.Event
    #: The other permits of its ticket, asked again while it was held (only on the entry
    #: the session's ``_held`` names): one holding, told every loss it is told.
    twins: list[_Held] = field(default_factory=list)

    def set_lost(self, why: Lost, replace: bool = False) -> None:
        # PLANTED(python-told-late): a loss learned now reaches the application 3 s later.
        if _planted("python-told-late"):
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().call_later(3.0, self._set_lost, why, replace)
                return
        self._set_lost(why, replace)

    def _set_lost(self, why: Lost, replace: bool) -> None:
        if self.lost is None or replace:
            self.lost = why
            self.changed.set()
        for twin in self.twins:
            twin._set_lost(why, replace)


@dataclass
class _Grant:
    fence: int
    units: int
    held: _Held


@dataclass
class _Waiting:
    """A ticket whose acquire was sent and not yet granted."""

    path: str
    body: dict[str, Any]
    tenant: str
    agent: str | None
    future: asyncio.Future[_Grant | WeirError]
    #: A loss learned before the grant (a halt): the permit starts lost.
    lost: Lost | None = None
    #: Tickets ahead of it when the cluster last answered ``queued``.
    position: int | None = None


@dataclass(frozen=True)
class _Request:
    """What an acquire asks for, before a ticket is given to it."""

    tenant: str
    limit: str
    key: str | None
    units: int
    #: The request's own limit first, then the caller's parts (what a refusal names).
    parts: tuple[Part, ...]
    estimate: bool
    priority: Priority
    agent: str | None

    def body(self, session: int, ticket: int, wait: bool) -> dict[str, Any]:
        """The acquire's JSON body for ``ticket`` of ``session`` (``timeout_ms = 0``: the
        grant of a queued ticket comes on the event stream)."""
        body: dict[str, Any] = {
            "session": session,
            "ticket": ticket,
            "units": self.units,
            "priority": self.priority.level,
            "fairness_key": self.priority.fairness_key,
            "weight": self.priority.weight,
            "wait": wait,
            "timeout_ms": 0,
        }
        if self.key is not None:
            body["key"] = self.key
        if len(self.parts) > 1:
            body["parts"] = [p.to_json() for p in self.parts[1:]]
        if self.estimate:
            body["estimate"] = True
        if self.agent is not None:
            body["agent"] = self.agent
        return body


def _part_name(part: Part) -> str:
    """A part as the CLI writes it: ``LIMIT[:UNITS][@KEY]``, units only when not 1."""
    units = "" if part.units == 1 else f":{part.units}"
    key = "" if part.key is None else f"@{part.key}"
    return f"{part.limit}{units}{key}"


def _lack(part: Part, status: Mapping[str, Any]) -> str | None:
    """What ``part`` lacks in ``status`` (its limit's or key's, as JSON), ``None`` when it
    has room; a shadow limit never refuses."""
    if status.get("shadow"):
        return None
    if status.get("removing"):
        return "the limit is being removed"
    concurrent, in_use = int(status.get("concurrent", 0)), int(status.get("in_use", 0))
    if concurrent > 0 and in_use + part.units > concurrent:
        return f"{in_use} of {concurrent} in use, needs {part.units}"
    per_second, tokens = float(status.get("per_second", 0.0)), int(status.get("tokens") or 0)
    if per_second > 0 and tokens < part.units:
        return (f"{tokens} of {status.get('burst')} tokens at its last refill, needs "
                f"{part.units} (refills {per_second:g} a second)")
    return None


def _discard(task: asyncio.Future[Any]) -> None:
    """Cancels ``task`` if pending; its outcome is not wanted."""
    if not task.done():
        task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


class AsyncPermit:
    """A held permit: its fence, whether it may be lost, and its release.

    Believed held from its grant until :meth:`release` is called (the belief ends before
    the release is sent) or until :meth:`lost_reason` is not ``None``.
    """

    def __init__(
        self,
        session: AsyncSession,
        request: _Request,
        ticket: int,
        grant: _Grant,
    ) -> None:
        self._session = session
        self._held = grant.held
        self._released = False
        self.tenant = request.tenant
        self.limit = request.limit
        #: The key of ``limit`` (a keyed limit), else ``None``.
        self.key = request.key
        #: Every part granted under this permit's fence, its own limit first.
        self.parts = request.parts
        #: Whether the rate parts' units are an estimate, to :meth:`settle`.
        self.estimate = request.estimate
        self.ticket = ticket
        self.fence = grant.fence
        self.units = grant.units

    def __repr__(self) -> str:
        return (
            f"AsyncPermit({self.tenant}/{self.limit}, fence={self.fence}, units={self.units},"
            f" lost={self.lost_reason()})"
        )

    @property
    def session(self) -> AsyncSession:
        return self._session

    @property
    def released(self) -> bool:
        return self._released

    def lost_reason(self) -> Lost | None:
        """Why the permit may no longer be held, or ``None`` while it is believed held."""
        if self._held.lost is not None:
            return self._held.lost
        if boot_now() >= self._session._told_at():
            return LOST_DEADLINE
        return None

    async def lost(self) -> Lost:
        """Resolves when the permit may no longer be held: the session's belief deadline
        passed, a halt covers it, or the session expired or was closed."""
        while True:
            why = self.lost_reason()
            if why is not None:
                return why
            left = self._session._told_at() - boot_now()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._held.changed.wait(), timeout=min(left, LOOK_EVERY))

    async def settle(self, cost: int) -> CostSettlement:
        """Settles a permit acquired with ``estimate=True`` at its actual ``cost`` in tokens,
        on every rate part: below the estimate the unused tokens return to the bucket,
        above it the difference is charged and reported as an overrun. Idempotent: settling
        again (a retry after :class:`~weir.OutcomeUnknown`) answers ``duplicate``. A permit
        that holds nothing else (a rate-only limit) is finished by its settlement; one with
        concurrent parts stays held until released."""
        if not self.estimate:
            raise ValueError(f"{self.tenant}/{self.limit} fence {self.fence}: only a permit "
                             "acquired with estimate=True settles")
        if cost < 0:
            raise ValueError("cost must be at least 0 tokens")
        s = self._session
        answer = await s._transport.call(
            "POST", f"/v1/sessions/{s.id}/settle", {"ticket": self.ticket, "cost": int(cost)}
        )
        if not isinstance(answer, dict):
            raise ProtocolError(f"settle answered {answer!r}")
        if len(self.parts) == 1:
            return CostSettlement.from_json(answer, int(cost), [(self.parts[0], self.units)])
        return CostSettlement.from_json(answer, int(cost), await self._estimates())

    async def _estimates(self) -> list[tuple[Part, int | None]]:
        """Each part with its estimate: its units on a limit that rates, ``None`` on one
        that does not (only rate parts hold an estimate), as each limit is defined now."""
        rates: dict[str, bool] = {}
        for part in self.parts:
            if part.limit not in rates:
                v = await self._session._transport.call(
                    "GET", f"/v1/tenants/{q(self.tenant)}/limits/{q(part.limit)}")
                if not isinstance(v, dict):
                    raise ProtocolError(f"limit show answered {v!r}")
                rates[part.limit] = float(v.get("per_second", 0.0)) > 0
        return [(p, p.units if rates[p.limit] else None) for p in self.parts]

    async def release(self) -> None:
        """Releases the permit and waits for the cluster to apply it. The belief ends
        before the release is sent (G2). If the release's outcome is unknown (or no node
        answered) it raises, and the release goes on in the background, retried until its
        outcome is known or the session has ended. Calling it again does nothing."""
        if self._released:
            return
        self._released = True
        s = self._session
        s._forget(self.ticket, self._held)
        try:
            await s._transport.call(
                "POST", f"/v1/sessions/{s.id}/release", {"ticket": self.ticket}
            )
        except Refused:
            # UnknownSession: the session's end freed everything it held.
            return
        except (Unauthenticated, Forbidden, ProtocolError):
            raise
        except WeirError:
            s._release_in_background(self.ticket, pause_first=True)
            raise
        except asyncio.CancelledError:
            s._release_in_background(self.ticket, pause_first=False)
            raise

    async def _release_on_exit(self) -> None:
        try:
            await self.release()
        except WeirError as e:
            log.warning("weir: release of %s/%s fence %d: %s", self.tenant, self.limit,
                        self.fence, e)

    async def __aenter__(self) -> AsyncPermit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._release_on_exit()


class AcquireContext(Opening["AsyncPermit"]):
    """What :meth:`AsyncSession.acquire` returns: await it for a permit (release it
    yourself), or use it as ``async with`` (released on exit)."""

    def __init__(self, acquire: Callable[[], Awaitable[AsyncPermit]]) -> None:
        super().__init__(acquire, lambda permit, *exc: permit._release_on_exit())


class AsyncSession:
    """A session: the client's identity on the cluster, kept alive in the background
    (module doc). Open one with :meth:`weir.AsyncClient.session`."""

    def __init__(
        self,
        transport: Transport,
        session_id: int,
        ttl: float,
        deadline: float,
        tenant: str,
        on_close: Callable[[AsyncSession], None] | None = None,
    ) -> None:
        self._transport = transport
        self.id = session_id
        self.ttl = ttl
        self._deadline = deadline
        self._tenant = tenant
        self._on_close = on_close
        self._next_ticket = 1
        self._waiting: dict[int, _Waiting] = {}
        self._held: dict[int, _Held] = {}
        self._ended: Lost | None = None
        self._reask_wanted = asyncio.Event()
        self._stream_up = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        #: The session's token leases, and its lease request counter (``seq``).
        self._leases: set[AsyncLease] = set()
        self._lease_seq = 0
        self._lease_lock = asyncio.Lock()
        #: Keep-alives acknowledged, keep-alives hedged, and every write hedged (keep-alives
        #: and acquires), for tests and diagnostics.
        self.keepalives_acknowledged = 0
        self.keepalives_hedged = 0
        self.writes_hedged = 0

    @classmethod
    async def open(
        cls,
        transport: Transport,
        ttl: float,
        tenant: str,
        on_close: Callable[[AsyncSession], None] | None = None,
    ) -> AsyncSession:
        if ttl <= 0:
            raise ValueError("ttl must be positive (seconds)")
        sent = boot_now()
        answer = await transport.call("POST", "/v1/sessions", {"ttl_ms": round(ttl * 1000)})
        if not isinstance(answer, dict) or "session" not in answer:
            raise ProtocolError(f"open session answered {answer!r}")
        granted_ttl = min(ttl, float(answer.get("ttl_ms", ttl * 1000)) / 1000.0)
        session = cls(
            transport, int(answer["session"]), granted_ttl,
            deadline_after(sent, granted_ttl), tenant, on_close,
        )
        session._start()
        return session

    def _start(self) -> None:
        self._tasks = [
            asyncio.ensure_future(self._renew()),
            asyncio.ensure_future(self._follow()),
            asyncio.ensure_future(self._reasker()),
        ]

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id}, ttl={self.ttl}, ended={self._ended})"

    # -- what callers read -------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """The belief deadline, on :func:`weir.boot_now`'s clock (seconds)."""
        return self._deadline

    def deadline_left(self) -> float:
        """Seconds until the belief deadline (negative once passed)."""
        return self._deadline - boot_now()

    def _told_at(self) -> float:
        """When the application is told that the belief deadline passed (``lost()``,
        ``lost_reason()``, the loss marked on held permits): at the deadline itself."""
        # PLANTED(python-told-late): the application is told 3 s after the deadline.
        if _planted("python-told-late"):
            return self._deadline + 3.0
        return self._deadline

    @property
    def ended(self) -> Lost | None:
        """Why the session ended (expired, closed), or ``None`` while it lives."""
        return self._ended

    @property
    def events_connected(self) -> bool:
        """Whether the event stream is connected now."""
        return self._stream_up.is_set()

    async def wait_events_connected(self, timeout: float) -> bool:
        """Waits (at most ``timeout`` s) until the event stream is connected."""
        try:
            await asyncio.wait_for(self._stream_up.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def queued_position(self) -> int | None:
        """While an acquire waits: how many tickets were ahead of it when the cluster last
        answered ``queued`` (an upper bound on the position now, unless higher-priority
        tickets arrived since)."""
        for w in self._waiting.values():
            if w.position is not None:
                return w.position
        return None

    # -- acquire -----------------------------------------------------------------------

    def acquire(
        self,
        limit: str,
        units: int = 1,
        *,
        priority: int | Priority = 0,
        fairness_key: str | None = None,
        weight: int | None = None,
        agent: str | None = None,
        wait: bool = True,
        timeout: float | None = None,
        tenant: str | None = None,
        key: str | None = None,
        parts: list[Part] | None = None,
        estimate: bool = False,
        ticket: int | None = None,
    ) -> AcquireContext:
        """Acquires ``units`` of ``limit``: ``async with session.acquire("db") as permit``
        (released on exit) or ``permit = await session.acquire("db")``.

        ``priority`` is a level (higher first) or a :class:`~weir.Priority`;
        ``fairness_key`` and ``weight`` set its fair share. ``agent`` names the acting
        agent (agent halts cover it). ``wait=False`` raises :class:`~weir.Busy` at once
        when there is no room; otherwise it waits, at most ``timeout`` seconds (then
        :class:`~weir.TimedOut`, the ticket withdrawn).

        ``key``: the key of a keyed limit. ``parts``: more limits of the tenant
        (:class:`~weir.Part`), granted with ``limit`` under one fence or not at all; a
        refusal names its part (:attr:`~weir.Refused.part`). ``estimate``: the units of the
        rate parts are an estimate, settled later with :meth:`AsyncPermit.settle`.

        ``ticket``: asks with this ticket number instead of the session's next one (for
        drivers and recovery tools). Asking again with the ticket of a permit this session
        holds is a re-ask, answered with the same grant (same fence, nothing charged twice):
        the two permits are one holding (the module doc), and releasing either tells the
        other (:attr:`~weir.LostKind.RELEASED`). A ticket already released is refused
        :class:`~weir.TicketReleased`; one still being acquired raises ``ValueError``.
        """
        if ticket is not None and (isinstance(ticket, bool) or not isinstance(ticket, int)
                                   or ticket < 0):
            raise ValueError("ticket must be a whole number, at least 0")
        prio = priority if isinstance(priority, Priority) else Priority(level=int(priority))
        if fairness_key is not None or weight is not None:
            prio = Priority(
                level=prio.level,
                fairness_key=prio.fairness_key if fairness_key is None else fairness_key,
                weight=prio.weight if weight is None else weight,
            )
        tenant = self._tenant if tenant is None else tenant
        request = _Request(
            tenant, limit, key, units, (Part(limit, units, key), *(parts or ())), estimate,
            prio, agent,
        )

        def start() -> Awaitable[AsyncPermit]:
            if ticket is not None and ticket in self._held:
                return self._ask_again(request, ticket, wait, timeout)
            return self._acquire(request, wait, timeout, ticket)

        return AcquireContext(start)

    async def _lacking(self, request: _Request) -> tuple[Part | None, str]:
        """The first part of ``request`` that lacks room now and ``; PART lacks room: WHAT``
        for each that does, from each part's status read after the wait (a release or a
        refill since shows as room); ``(None, "")`` when no part can be read."""
        first: Part | None = None
        clauses: list[str] = []
        read = 0
        for part in request.parts:
            path = f"/v1/tenants/{q(request.tenant)}/limits/{q(part.limit)}"
            if part.key is not None:
                path += f"/keys/{q(part.key)}"
            try:
                v = await self._transport.call("GET", path)
            except WeirError:
                continue
            if not isinstance(v, dict):
                continue
            read += 1
            what = _lack(part, v)
            if what is not None:
                first = first or part
                clauses.append(f"; {_part_name(part)} lacks room: {what}")
        if read == 0:
            return None, ""
        return first, "".join(clauses) or "; every part has room now"

    async def _acquire(
        self, request: _Request, wait: bool, timeout: float | None, asked: int | None
    ) -> AsyncPermit:
        if self._ended is not None:
            raise SessionLost(f"session {self.id} ended: {self._ended}", self._ended)
        if asked is None:
            ticket = self._next_ticket
        elif asked in self._waiting:
            raise ValueError(f"ticket {asked} of session {self.id} is being acquired already")
        else:
            ticket = asked
        self._next_ticket = max(self._next_ticket, ticket + 1)
        tenant, limit, agent = request.tenant, request.limit, request.agent
        path = f"/v1/tenants/{q(tenant)}/limits/{q(limit)}/acquire"
        body = request.body(self.id, ticket, wait)
        future: asyncio.Future[_Grant | WeirError] = asyncio.get_running_loop().create_future()
        # Registered before it is sent: a grant on the event stream ahead of the answer
        # finds it.
        self._waiting[ticket] = _Waiting(path, body, tenant, agent, future)
        started = time.monotonic()
        armed = True
        try:
            try:
                answer = await self._hedged("POST", path, body)
            except Refused as r:
                self._refused(ticket, r)
            except WeirError as e:
                if e.definitely_failed:
                    armed = False
                    self._waiting.pop(ticket, None)
                raise
            else:
                self._answered(ticket, answer)
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            done, _ = await asyncio.wait({future}, timeout=left)
            if not done:
                armed = False
                await self._withdraw(ticket)
                part, lacking = await self._lacking(request)
                raise TimedOut(f"{tenant}/{limit}: still waiting after {timeout:g} s{lacking}",
                               part)
            outcome = future.result()
            # Refused (nothing held) or session lost (its end frees every ticket).
            armed = False
            if isinstance(outcome, Refused):
                raise name_part(outcome, request.parts)
            if isinstance(outcome, WeirError):
                raise outcome
            return AsyncPermit(self, request, ticket, outcome)
        finally:
            if armed:
                self._abandon(ticket)

    async def _ask_again(
        self, request: _Request, ticket: int, wait: bool, timeout: float | None
    ) -> AsyncPermit:
        """Asks again for ``ticket``, which this session holds: the cluster answers its grant
        (idempotent by session and ticket), and the new permit joins the held one's holding
        (``_Held.twins``). Nothing is registered, so a failure leaves the ticket with the
        permit that holds it."""
        if self._ended is not None:
            raise SessionLost(f"session {self.id} ended: {self._ended}", self._ended)
        tenant, limit = request.tenant, request.limit
        path = f"/v1/tenants/{q(tenant)}/limits/{q(limit)}/acquire"
        try:
            answer = await asyncio.wait_for(
                self._hedged("POST", path, request.body(self.id, ticket, wait)), timeout)
        except TimeoutError:
            if timeout is None:
                raise
            raise TimedOut(f"{tenant}/{limit}: ticket {ticket} asked again, no answer after "
                           f"{timeout:g} s") from None
        except UnknownSession as r:
            self._end(LOST_EXPIRED)
            raise name_part(r, request.parts) from None
        except Refused as r:
            raise name_part(r, request.parts) from None
        if not isinstance(answer, dict) or answer.get("status") != "granted":
            raise ProtocolError(f"unexpected answer to a held ticket: {answer!r}")
        if self._ended is not None:
            raise SessionLost(f"session {self.id} ended: {self._ended}", self._ended)
        first = self._held.get(ticket)
        if first is None:
            # Released meanwhile through its other permit: the grant answered is held no more.
            raise TicketReleased(
                f"ticket {ticket} of session {self.id} was released meanwhile",
                fields={"session": self.id, "ticket": ticket})
        held = _Held(tenant, request.agent, first.lost, asyncio.Event())
        if held.lost is not None:
            held.changed.set()
        first.twins.append(held)
        grant = _Grant(int(answer["fence"]), int(answer.get("units", 1)), held)
        return AsyncPermit(self, request, ticket, grant)

    # -- token leases ------------------------------------------------------------------

    def lease(
        self,
        limit: str,
        *,
        rate_per_s: float,
        cap: int,
        key: str | None = None,
        tenant: str | None = None,
    ) -> LeaseOpener:
        """Leases a share of the rate limit ``limit`` (or of its key ``key``) for this
        session, wanting at most ``rate_per_s`` tokens a second and ``cap`` tokens at once:
        takes on it are then decided locally while it has tokens and the belief deadline
        holds (:class:`~weir.AsyncLease`). ``async with session.lease(...) as lease`` (ended
        on exit) or ``lease = await session.lease(...)``. The first request is answered
        before the lease is given; a refusal (:class:`~weir.Halted`,
        :class:`~weir.UnknownLimit`, a limit that caps concurrency or has no rate) is
        raised."""
        tenant = self._tenant if tenant is None else tenant

        async def open_() -> AsyncLease:
            if self._ended is not None:
                raise SessionLost(f"session {self.id} ended: {self._ended}", self._ended)
            lease = AsyncLease(self, tenant, limit, key, rate_per_s, cap)
            self._leases.add(lease)
            try:
                await lease._open()
            except BaseException:
                self._leases.discard(lease)
                lease._stop("not opened")
                raise
            return lease

        return LeaseOpener(open_)

    def leases(self) -> list[AsyncLease]:
        """The session's leases not ended."""
        return list(self._leases)

    # -- the tickets -------------------------------------------------------------------

    def _answered(self, ticket: int, answer: Any) -> None:
        status = answer.get("status") if isinstance(answer, dict) else None
        if status == "granted":
            self._granted(ticket, int(answer["fence"]), int(answer.get("units", 1)))
        elif status == "queued":
            w = self._waiting.get(ticket)
            if w is not None and isinstance(answer.get("position"), int):
                w.position = answer["position"]
        else:
            self._refused(ticket, ProtocolError(f"unexpected answer to an acquire: {answer!r}"))

    def _granted(self, ticket: int, fence: int, units: int) -> None:
        w = self._waiting.pop(ticket, None)
        if w is None:
            return
        lost = self._ended or w.lost
        held = _Held(w.tenant, w.agent, lost, asyncio.Event())
        if lost is not None:
            held.changed.set()
        if w.future.done():
            self._release_in_background(ticket, pause_first=False)
            return
        self._held[ticket] = held
        w.future.set_result(_Grant(fence, units, held))

    def _refused(self, ticket: int, error: WeirError) -> None:
        if isinstance(error, UnknownSession):
            self._end(LOST_EXPIRED)
            return
        w = self._waiting.pop(ticket, None)
        if w is not None and not w.future.done():
            w.future.set_result(error)

    def _lose(self, ticket: int, why: Lost) -> None:
        held = self._held.get(ticket)
        if held is not None:
            held.set_lost(why)
            return
        w = self._waiting.get(ticket)
        if w is not None and w.lost is None:
            w.lost = why

    def _forget(self, ticket: int, held: _Held) -> None:
        """The permit of ``ticket`` whose entry is ``held`` is released: the ticket is no
        longer the session's, and every other permit of it (asked again) is told
        :attr:`LostKind.RELEASED` (unless it was lost already)."""
        first = self._held.get(ticket)
        if first is None:
            return
        holding = [first, *first.twins]
        if not any(h is held for h in holding):
            return
        del self._held[ticket]
        first.twins = []  # so that telling ``first`` does not tell ``held``
        for other in holding:
            if other is not held:
                other.set_lost(LOST_RELEASED)

    def _end(self, why: Lost) -> None:
        if self._ended is None:
            self._ended = why
            log.info("weir: session %d ended: %s", self.id, why)
        for held in self._held.values():
            held.set_lost(why, replace=True)
        self._held.clear()
        for lease in self._leases:
            lease._stop(f"session {self.id} ended: {why}")
        self._leases.clear()
        waiting, self._waiting = self._waiting, {}
        for w in waiting.values():
            if not w.future.done():
                w.future.set_result(SessionLost(f"session {self.id} ended: {why}", why))
        self._reask_wanted.set()

    def _abandon(self, ticket: int) -> None:
        self._waiting.pop(ticket, None)
        self._held.pop(ticket, None)
        self._release_in_background(ticket, pause_first=False)

    async def _withdraw(self, ticket: int) -> None:
        self._waiting.pop(ticket, None)
        self._held.pop(ticket, None)
        try:
            await self._transport.call(
                "POST", f"/v1/sessions/{self.id}/release", {"ticket": ticket}
            )
        except Refused:
            pass
        except WeirError:
            self._release_in_background(ticket, pause_first=True)

    def _release_in_background(self, ticket: int, pause_first: bool) -> None:
        task = asyncio.ensure_future(self._release_until_known(ticket, pause_first))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_until_known(self, ticket: int, pause_first: bool) -> None:
        attempt = 0
        while True:
            if attempt > 0 or pause_first:
                await asyncio.sleep(jittered(RELEASE_PAUSE))
            attempt += 1
            if self._ended is not None and self._ended.kind is not LostKind.DEADLINE:
                return  # closed or expired: the end freed the ticket
            try:
                await self._transport.call(
                    "POST", f"/v1/sessions/{self.id}/release", {"ticket": ticket}
                )
                return
            except Refused:
                return
            except (Unauthenticated, Forbidden, ProtocolError) as e:
                log.warning("weir: release of ticket %d of session %d: %s", ticket, self.id, e)
                return
            except WeirError as e:
                if self._transport.closed:
                    return
                log.info("weir: release of ticket %d of session %d, try %d: %s",
                         ticket, self.id, attempt, e)

    # -- background work ---------------------------------------------------------------

    async def _renew(self) -> None:
        """Keep-alives every TTL/5 (sooner after one that was not acknowledged), and every
        held permit lost once the deadline passes."""
        every = self.ttl / KEEPALIVES_PER_TTL
        next_keepalive = time.monotonic() + every
        while self._ended is None and not self._transport.closed:
            left = self._deadline - boot_now()
            if boot_now() >= self._told_at():
                for held in self._held.values():
                    held.set_lost(LOST_DEADLINE)
            wait = min(next_keepalive - time.monotonic(), LOOK_EVERY)
            if left > 0:
                wait = min(wait, left)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            next_keepalive = await self._keep_alive(every)

    async def _keep_alive(self, every: float) -> float:
        """One keep-alive; returns when the next is due (monotonic)."""
        due = time.monotonic() + every
        sent = boot_now()
        try:
            answer = await self._hedged_keep_alive()
        except UnknownSession:
            self._end(LOST_EXPIRED)
            return due
        except WeirError as e:
            log.info("weir: session %d keep-alive failed (%s), %.0f ms before the deadline",
                     self.id, e, (self._deadline - boot_now()) * 1000)
            return time.monotonic() + min(KEEPALIVE_RETRY, every)
        if isinstance(answer, dict) and answer.get("status") == "kept_alive":
            self._extend(sent)
            self.keepalives_acknowledged += 1
            return due
        log.warning("weir: session %d keep-alive answered %r", self.id, answer)
        return time.monotonic() + min(KEEPALIVE_RETRY, every)

    async def _hedged_keep_alive(self) -> Any:
        return await self._hedged("POST", f"/v1/sessions/{self.id}/keepalive")

    async def _hedged(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> Any:
        """An idempotent write of this session (a keep-alive, an acquire) to the current
        node, hedged to the others once it has gone unanswered for :data:`HEDGE_AFTER` with
        less than :data:`HEDGE_WHEN_LEFT` of the belief left, whether or not the node is
        heard from (the module doc): the first answer wins."""
        primary: asyncio.Future[Any] = asyncio.ensure_future(
            self._transport.call(method, path, body)
        )
        hedge: asyncio.Future[Any] | None = None
        sent = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({primary}, timeout=HEDGE_LOOK)
                if done:
                    return primary.result()
                left = self._deadline - boot_now()
                if (
                    left < HEDGE_WHEN_LEFT
                    and len(self._transport.nodes) > 1
                    and time.monotonic() - sent >= HEDGE_AFTER
                ):
                    break
            self.writes_hedged += 1
            if path.endswith("/keepalive"):
                self.keepalives_hedged += 1
            log.info("weir: session %d %s unanswered for %.0f ms near its deadline, hedged "
                     "to the other nodes", self.id, path, (time.monotonic() - sent) * 1000)
            hedge = asyncio.ensure_future(self._transport.hedge(method, path, body))
            done, _ = await asyncio.wait({primary, hedge}, return_when=asyncio.FIRST_COMPLETED)
            if primary in done:
                return primary.result()
            if hedge.exception() is None:
                return hedge.result()
            return await primary
        finally:
            _discard(primary)
            if hedge is not None:
                _discard(hedge)

    def _extend(self, sent: float) -> None:
        new = deadline_after(sent, self.ttl)
        if new > self._deadline:
            self._deadline = new

    async def _follow(self) -> None:
        """Follows the session's events; (re)connects as long as the session lives."""
        path = f"/v1/sessions/{self.id}/events"
        while self._ended is None and not self._transport.closed:
            try:
                await self._transport.stream(path, self._on_open, self._on_event)
            except UnknownSession:
                # A node behind the leader may not know the session yet: ask the leader.
                if await self._gone():
                    return
                self._transport.move_on(self._transport.current)
            except (Unauthenticated, Forbidden) as e:
                log.error("weir: session %d event stream: %s", self.id, e)
                await asyncio.sleep(1.0)
            except WeirError as e:
                log.info("weir: session %d event stream: %s", self.id, e)
            finally:
                self._stream_up.clear()
            if self._ended is None:
                await asyncio.sleep(jittered(STREAM_PAUSE))

    async def _gone(self) -> bool:
        """Whether the session is gone on the cluster (a keep-alive says so)."""
        sent = boot_now()
        try:
            answer = await self._transport.call("POST", f"/v1/sessions/{self.id}/keepalive")
        except UnknownSession:
            self._end(LOST_EXPIRED)
            return True
        except WeirError:
            return False
        if isinstance(answer, dict) and answer.get("status") == "kept_alive":
            self._extend(sent)
        return False

    def _on_open(self) -> None:
        self._stream_up.set()
        self._reask_wanted.set()

    def _on_event(self, name: str, data: str) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            log.warning("weir: session %d: event %s with bad data %r", self.id, name, data)
            return
        if not isinstance(event, dict):
            return
        if name == "lagged":
            self._reask_wanted.set()
            return
        if event.get("session") != self.id:
            return
        ticket = event.get("ticket")
        if name == "granted" and isinstance(ticket, int):
            self._granted(ticket, int(event["fence"]), int(event.get("units", 1)))
        elif name == "refused" and isinstance(ticket, int):
            if ticket in self._waiting:
                task = asyncio.ensure_future(
                    self._typed_refusal(
                        ticket, str(event.get("error", "")), str(event.get("message", ""))
                    )
                )
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        elif name == "halted" and isinstance(ticket, int):
            try:
                scope = HaltScope.parse(event.get("scope"))
            except ValueError:
                scope = HaltScope()
            self._lose(ticket, Lost(LostKind.HALTED, scope, str(event.get("reason", ""))))
        elif name == "expired":
            self._end(LOST_EXPIRED)

    async def _typed_refusal(self, ticket: int, name: str, message: str) -> None:
        """A waiting ticket was refused: one more ask answers the refusal with its fields
        (the event carries only its name and text)."""
        w = self._waiting.get(ticket)
        if w is None:
            return
        try:
            answer = await self._transport.call("POST", w.path, w.body)
        except Refused as r:
            self._refused(ticket, r)
        except WeirError:
            self._refused(ticket, refusal(name, message))
        else:
            self._answered(ticket, answer)

    async def _reasker(self) -> None:
        while self._ended is None:
            await self._reask_wanted.wait()
            self._reask_wanted.clear()
            if self._ended is not None:
                return
            await self._reask()

    async def _reask(self) -> None:
        """Asks again for every waiting ticket (idempotent), then reads the halts of every
        tenant it holds permits of."""
        for ticket, w in list(self._waiting.items()):
            if ticket not in self._waiting:
                continue
            try:
                answer = await self._transport.call("POST", w.path, w.body)
            except Refused as r:
                self._refused(ticket, r)
            except WeirError as e:
                log.info("weir: session %d re-ask of ticket %d: %s", self.id, ticket, e)
            else:
                self._answered(ticket, answer)
        for tenant in sorted({h.tenant for h in self._held.values()}):
            try:
                halts = await self._transport.call("GET", f"/v1/tenants/{q(tenant)}/halts")
            except WeirError:
                continue
            if isinstance(halts, dict) and isinstance(halts.get("halts"), list):
                self._learn_halts(tenant, [Halt.from_json(h) for h in halts["halts"]])

    def _learn_halts(self, tenant: str, halts: list[Halt]) -> None:
        for held in self._held.values():
            if held.tenant != tenant or held.lost is not None:
                continue
            for h in halts:
                if h.scope.is_tenant or h.scope.agent == held.agent:
                    held.set_lost(Lost(LostKind.HALTED, h.scope, h.reason))
                    break

    # -- the end -----------------------------------------------------------------------

    async def close(self) -> None:
        """Closes the session: every permit is released and every ticket withdrawn. Raises
        if the cluster did not confirm it (the session then expires after its TTL)."""
        if self._ended is not None and self._ended.kind is LostKind.CLOSED:
            return
        self._end(LOST_CLOSED)
        # The session's end frees everything it holds: background releases are moot.
        for task in [*self._tasks, *self._background]:
            _discard(task)
        if self._on_close is not None:
            self._on_close(self)
        with contextlib.suppress(UnknownSession):
            await self._transport.call("DELETE", f"/v1/sessions/{self.id}")

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        except WeirError as e:
            log.warning("weir: close of session %d: %s (it expires after its TTL)", self.id, e)


__all__ = ["AcquireContext", "AsyncPermit", "AsyncSession"]
