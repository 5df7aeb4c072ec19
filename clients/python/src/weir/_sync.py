"""The synchronous facade: the asyncio client run on an event loop in a thread of its own.

Every blocking call hands its coroutine to that loop and waits for it; sessions keep
themselves alive on that thread (keep-alives, the event stream), so a caller blocked in
its own work does not starve them. A call interrupted in the caller's thread (a
``KeyboardInterrupt``) cancels its coroutine: an acquire cancelled that way releases its
ticket in the background, as the asyncio API does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from ._client import KEEP, AsyncClient, _Keep
from ._clock import LOOK_EVERY
from ._lease import AsyncLease, LeaseFigures
from ._session import AsyncPermit, AsyncSession
from ._transport import REQUEST_DEADLINE
from .types import (
    CostSettlement,
    Halt,
    KeyPage,
    LimitsChange,
    LimitSpec,
    LimitStatus,
    Lost,
    Part,
    Priority,
    Run,
    Settlement,
    Spent,
    TenantStatus,
)

T = TypeVar("T")

log = logging.getLogger("weir")

#: Longest :meth:`Client.close` waits for the sessions to close (s).
CLOSE_WAIT = 30.0


class _Runner:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="weir-client", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking weir call from the client's own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self.loop.close()


class Permit:
    """A held permit (synchronous). ``with session.acquire("db") as permit:`` releases it
    on exit; see :class:`weir.AsyncPermit` for the rules."""

    def __init__(self, runner: _Runner, permit: AsyncPermit) -> None:
        self._runner = runner
        self.aio = permit
        self.tenant = permit.tenant
        self.limit = permit.limit
        self.ticket = permit.ticket
        self.fence = permit.fence
        self.units = permit.units
        self.key = permit.key
        self.parts = permit.parts
        self.estimate = permit.estimate
        #: The watches :meth:`on_lost` started (kept referenced until they end).
        self._watchers: list[concurrent.futures.Future[None]] = []

    def __repr__(self) -> str:
        return f"Permit({self.tenant}/{self.limit}, fence={self.fence}, units={self.units})"

    def lost_reason(self) -> Lost | None:
        """Why the permit may no longer be held, or ``None`` while it is believed held."""
        return self.aio.lost_reason()

    def lost(self, timeout: float | None = None) -> Lost | None:
        """Blocks until the permit may no longer be held (answers why), or ``timeout``
        seconds pass (answers ``None``)."""

        async def wait() -> Lost | None:
            try:
                return await asyncio.wait_for(self.aio.lost(), timeout)
            except TimeoutError:
                return None

        return self._runner.run(wait())

    def on_lost(self, callback: Callable[[Lost], object]) -> None:
        """Calls ``callback(why)`` once when the permit may no longer be held (when
        :meth:`lost` would answer), unless the permit is released first; returns at once.
        The callback runs on the client's thread, the one that keeps the sessions alive: it
        must be quick and must not make a blocking weir call (that raises
        ``RuntimeError``); hand the news to the work's own thread (set an event, cancel a
        job). An exception it raises is logged and dropped."""
        permit = self.aio

        async def watch() -> None:
            lost = asyncio.ensure_future(permit.lost())
            while not lost.done():
                if permit.released:
                    lost.cancel()
                    return
                await asyncio.wait({lost}, timeout=LOOK_EVERY)
            if permit.released:
                return
            try:
                callback(lost.result())
            except Exception:
                log.exception("the on_lost callback of %r raised", self)

        self._watchers.append(asyncio.run_coroutine_threadsafe(watch(), self._runner.loop))

    def settle(self, cost: int) -> CostSettlement:
        """Settles a permit acquired with ``estimate=True`` at its actual cost; see
        :meth:`weir.AsyncPermit.settle`."""
        return self._runner.run(self.aio.settle(cost))

    def release(self) -> None:
        """Releases the permit; see :meth:`weir.AsyncPermit.release`."""
        self._runner.run(self.aio.release())

    def __enter__(self) -> Permit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._runner.run(self.aio._release_on_exit())


class Lease:
    """A token lease (synchronous); ``with session.lease(...) as lease:`` ends it on exit.
    See :class:`weir.AsyncLease` for the rules. :meth:`try_take` runs in the caller's
    thread, without a hop to the client's loop."""

    def __init__(self, runner: _Runner, lease: AsyncLease) -> None:
        self._runner = runner
        self.aio = lease
        self.tenant = lease.tenant
        self.limit = lease.limit
        self.key = lease.key

    def __repr__(self) -> str:
        return repr(self.aio).replace("AsyncLease", "Lease", 1)

    @property
    def figures(self) -> LeaseFigures:
        return self.aio.figures

    @property
    def ended(self) -> str | None:
        return self.aio.ended

    def try_take(self, units: int = 1) -> bool:
        """Takes ``units`` from the local bucket, or answers ``False``: no network."""
        return self.aio.try_take(units)

    def take(self, units: int = 1, *, wait: float | None = None) -> int | None:
        """Takes ``units`` locally, else from the cluster; see
        :meth:`weir.AsyncLease.take`."""
        if self.aio.try_take(units):
            return None
        return self._runner.run(self.aio._ask_cluster(units, wait))

    def end(self) -> None:
        self._runner.run(self.aio.end())

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._runner.run(self.aio._end_on_exit())


class Session:
    """A session (synchronous), kept alive by the client's thread; see
    :class:`weir.AsyncSession`."""

    def __init__(self, runner: _Runner, session: AsyncSession) -> None:
        self._runner = runner
        self.aio = session
        self.id = session.id
        self.ttl = session.ttl

    def __repr__(self) -> str:
        return f"Session(id={self.id}, ttl={self.ttl})"

    @property
    def deadline(self) -> float:
        """The belief deadline on :func:`weir.boot_now`'s clock."""
        return self.aio.deadline

    def deadline_left(self) -> float:
        return self.aio.deadline_left()

    @property
    def ended(self) -> Lost | None:
        return self.aio.ended

    def queued_position(self) -> int | None:
        return self.aio.queued_position()

    def wait_events_connected(self, timeout: float) -> bool:
        return self._runner.run(self.aio.wait_events_connected(timeout))

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
    ) -> Permit:
        """Acquires a permit, blocking while it waits; see
        :meth:`weir.AsyncSession.acquire`. Use the permit as ``with`` to release it on
        exit."""
        acquiring = self.aio.acquire(
            limit, units, priority=priority, fairness_key=fairness_key, weight=weight,
            agent=agent, wait=wait, timeout=timeout, tenant=tenant, key=key, parts=parts,
            estimate=estimate, ticket=ticket,
        )

        async def go() -> AsyncPermit:
            return await acquiring

        return Permit(self._runner, self._runner.run(go()))

    def lease(self, limit: str, *, rate_per_s: float, cap: int, key: str | None = None,
              tenant: str | None = None) -> Lease:
        """Leases a share of a rate limit; see :meth:`weir.AsyncSession.lease`. Use the
        lease as ``with`` to end it on exit."""
        opening = self.aio.lease(limit, rate_per_s=rate_per_s, cap=cap, key=key,
                                 tenant=tenant)

        async def go() -> AsyncLease:
            return await opening

        return Lease(self._runner, self._runner.run(go()))

    def close(self) -> None:
        self._runner.run(self.aio.close())

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._runner.run(self.aio.__aexit__(exc_type, exc, tb))


class Client:
    """A client of a Weir cluster (synchronous); the arguments are
    :class:`weir.AsyncClient`'s, and so are the operations."""

    def __init__(
        self,
        servers: str | Iterable[str] | None = None,
        *,
        ca: str | os.PathLike[str] | None = None,
        token: str | None = None,
        tenant: str | None = None,
        group: int | None = None,
        request_deadline: float = REQUEST_DEADLINE,
    ) -> None:
        self._runner = _Runner()

        async def make() -> AsyncClient:
            return AsyncClient(servers, ca=ca, token=token, tenant=tenant, group=group,
                               request_deadline=request_deadline)

        try:
            self.aio = self._runner.run(make())
        except BaseException:
            self._runner.stop()
            raise
        self.tenant = self.aio.tenant

    def __repr__(self) -> str:
        return f"Client(servers={self.aio.servers}, tenant={self.tenant!r})"

    @property
    def servers(self) -> list[str]:
        return self.aio.servers

    def close(self) -> None:
        """Closes every open session and the connections, and stops the client's thread."""
        try:
            self._runner.run(self.aio.aclose(), timeout=CLOSE_WAIT)
        finally:
            self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def session(self, ttl: float = 3.0, *, tenant: str | None = None) -> Session:
        """Opens a session (``with client.session() as s:`` closes it on exit)."""
        opening = self.aio.session(ttl, tenant=tenant)

        async def go() -> AsyncSession:
            return await opening

        return Session(self._runner, self._runner.run(go()))

    def define_limit(self, name: str, *, concurrent: int = 0, per_second: float = 0.0,
                     burst: int | None = None, tenant: str | None = None,
                     keyed: bool = False, keys_max: int | None = None,
                     shadow: bool = False) -> None:
        self._runner.run(self.aio.define_limit(name, concurrent=concurrent,
                                               per_second=per_second, burst=burst,
                                               tenant=tenant, keyed=keyed, keys_max=keys_max,
                                               shadow=shadow))

    def apply_limits(self, limits: Mapping[str, LimitSpec], *, prune: bool = False,
                     dry_run: bool = False, tenant: str | None = None) -> LimitsChange:
        return self._runner.run(self.aio.apply_limits(limits, prune=prune, dry_run=dry_run,
                                                      tenant=tenant))

    def place_tenant(self, group: int | None = None, *, tenant: str | None = None) -> int:
        return self._runner.run(self.aio.place_tenant(group, tenant=tenant))

    def show_limit(self, name: str, *, tenant: str | None = None) -> LimitStatus:
        return self._runner.run(self.aio.show_limit(name, tenant=tenant))

    def list_limits(self, *, prefix: str = "",
                    tenant: str | None = None) -> list[LimitStatus]:
        return self._runner.run(self.aio.list_limits(prefix=prefix, tenant=tenant))

    def key_status(self, name: str, key: str, *, tenant: str | None = None) -> LimitStatus:
        return self._runner.run(self.aio.key_status(name, key, tenant=tenant))

    def keys(self, name: str, *, after: str | None = None, limit: int = 100,
             tenant: str | None = None) -> KeyPage:
        return self._runner.run(self.aio.keys(name, after=after, limit=limit, tenant=tenant))

    def remove_limit(self, name: str, *, tenant: str | None = None) -> None:
        self._runner.run(self.aio.remove_limit(name, tenant=tenant))

    def fence_held(self, name: str, fence: int, *, tenant: str | None = None) -> bool:
        return self._runner.run(self.aio.fence_held(name, fence, tenant=tenant))

    def take(self, name: str, units: int = 1, *, agent: str | None = None,
             tenant: str | None = None, wait: float | None = None, key: str | None = None,
             parts: list[Part] | None = None,
             lease: Lease | AsyncLease | None = None) -> int | None:
        """See :meth:`weir.AsyncClient.take`; with ``lease``, a take the lease covers is
        decided in the caller's thread."""
        if lease is not None:
            aio = lease.aio if isinstance(lease, Lease) else lease
            aio.check_covers(self.tenant if tenant is None else tenant, name, key, parts, agent)
            if aio.try_take(units):
                return None
            return self._runner.run(aio._ask_cluster(units, wait))
        return self._runner.run(self.aio.take(name, units, agent=agent, tenant=tenant,
                                              wait=wait, key=key, parts=parts))

    def set_tenant(self, *, max_running: int | _Keep | None = KEEP,
                   budget_tokens: int | _Keep | None = KEEP,
                   budget_minor: int | _Keep | None = KEEP,
                   tenant: str | None = None) -> TenantStatus:
        return self._runner.run(self.aio.set_tenant(max_running=max_running,
                                                    budget_tokens=budget_tokens,
                                                    budget_minor=budget_minor, tenant=tenant))

    def show_tenant(self, *, tenant: str | None = None) -> TenantStatus:
        return self._runner.run(self.aio.show_tenant(tenant=tenant))

    def reserve(self, run: str, *, agent: str | None = None, period: str | None = None,
                hold_tokens: int | None = None, hold_minor: int | None = None,
                tenant: str | None = None) -> None:
        self._runner.run(self.aio.reserve(run, agent=agent, period=period,
                                          hold_tokens=hold_tokens, hold_minor=hold_minor,
                                          tenant=tenant))

    def release_run(self, run: str, *, tenant: str | None = None) -> None:
        self._runner.run(self.aio.release_run(run, tenant=tenant))

    def settle(self, run: str, *, epoch: int, period: str | None = None, tokens: int = 0,
               minor_units: int = 0, release_slot: bool = False,
               tenant: str | None = None) -> Settlement:
        return self._runner.run(self.aio.settle(run, epoch=epoch, period=period, tokens=tokens,
                                                minor_units=minor_units,
                                                release_slot=release_slot, tenant=tenant))

    def list_runs(self, *, tenant: str | None = None) -> list[Run]:
        return self._runner.run(self.aio.list_runs(tenant=tenant))

    def spent(self, period: str, *, tenant: str | None = None) -> Spent:
        return self._runner.run(self.aio.spent(period, tenant=tenant))

    def set_halt(self, reason: str, *, agent: str | None = None,
                 tenant: str | None = None) -> None:
        self._runner.run(self.aio.set_halt(reason, agent=agent, tenant=tenant))

    def clear_halt(self, *, agent: str | None = None, tenant: str | None = None) -> None:
        self._runner.run(self.aio.clear_halt(agent=agent, tenant=tenant))

    def list_halts(self, *, tenant: str | None = None) -> list[Halt]:
        return self._runner.run(self.aio.list_halts(tenant=tenant))

    def status(self) -> dict[str, Any]:
        return self._runner.run(self.aio.status())
