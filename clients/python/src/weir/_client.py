"""The asyncio client: every operation of the cluster's HTTP/JSON API, and sessions."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from ._config import resolve
from ._lease import AsyncLease, take_from_cluster
from ._opening import Opening
from ._session import AsyncSession, q
from ._transport import REQUEST_DEADLINE, Transport
from .errors import ProtocolError
from .types import (
    Halt,
    KeyPage,
    LimitsChange,
    LimitSpec,
    LimitStatus,
    Part,
    Run,
    Settlement,
    Spent,
    TenantStatus,
)


class _Keep:
    """The default of :meth:`AsyncClient.set_tenant`'s ceilings: leave it as it is."""

    _instance: _Keep | None = None

    def __new__(cls) -> _Keep:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = _Keep()
"""Leave a tenant ceiling as it is (:meth:`AsyncClient.set_tenant`); ``None`` clears it."""


class SessionOpener(Opening[AsyncSession]):
    """What :meth:`AsyncClient.session` returns: await it for a session (close it
    yourself), or use it as ``async with`` (closed on exit)."""

    def __init__(self, open_: Callable[[], Awaitable[AsyncSession]]) -> None:
        super().__init__(open_, lambda session, *exc: session.__aexit__(*exc))


def _expect_dict(answer: Any, what: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ProtocolError(f"{what} answered {answer!r}")
    return answer


def _expect_list(answer: Any, key: str, what: str) -> list[Any]:
    """The list under ``key`` of an answer ``{key: [...], ...}``."""
    items = _expect_dict(answer, what).get(key)
    if not isinstance(items, list):
        raise ProtocolError(f"{what} answered {answer!r}")
    return items


class AsyncClient:
    """A client of a Weir cluster over its HTTP/JSON API (asyncio).

    ``servers``: the nodes' HTTP addresses (``host:port`` or URLs; any node is an entry
    point), default ``WEIR_HTTP_SERVERS`` / ``WEIR_SERVERS`` / ``127.0.0.1:7611``. ``ca``: a
    PEM CA file to verify the nodes over TLS (default ``WEIR_CA``). ``token``: the bearer
    token (default ``WEIR_TOKEN``). ``tenant``: the tenant operations act in unless told
    otherwise (default ``WEIR_TENANT`` or ``default``). ``group``: on a cluster of several
    Raft groups, the data group the client speaks to, whose sessions it opens (default
    ``WEIR_GROUP``, else the nodes' default group); a session's request for a tenant
    placed in another group is refused :class:`~weir.WrongGroup` naming it.
    ``request_deadline``: how long one
    request is retried across nodes (seconds; at most 10, the default, so that a retried
    acquire stays within the 15 s for which the cluster remembers a finished ticket).
    """

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
        if not 0 < request_deadline <= REQUEST_DEADLINE:
            raise ValueError(f"request_deadline must be in (0, {REQUEST_DEADLINE:g}] seconds")
        self.settings = resolve(servers, ca, token, tenant, group=group)
        self.tenant = self.settings.tenant
        self._transport = Transport(self.settings, request_deadline)
        self._sessions: set[AsyncSession] = set()

    def __repr__(self) -> str:
        return f"AsyncClient(servers={list(self.settings.urls)}, tenant={self.tenant!r})"

    @property
    def servers(self) -> list[str]:
        """The nodes' base URLs."""
        return list(self.settings.urls)

    @property
    def current_server(self) -> str:
        """The node requests go to now."""
        return self._transport.current.url

    def _t(self, tenant: str | None) -> str:
        return q(self.tenant if tenant is None else tenant)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes every session still open (each bounded to a few seconds) and the
        connections."""
        sessions = list(self._sessions)
        if sessions:
            await asyncio.gather(
                *(asyncio.wait_for(s.close(), 5.0) for s in sessions), return_exceptions=True
            )
        await self._transport.aclose()

    # -- sessions ----------------------------------------------------------------------

    def session(self, ttl: float = 3.0, *, tenant: str | None = None) -> SessionOpener:
        """Opens a session with a TTL of ``ttl`` seconds (default 3), kept alive every
        TTL/5: ``async with client.session() as s`` (closed on exit) or
        ``s = await client.session()``. ``tenant`` is the default tenant of its acquires.
        A TTL of at least 3 s rides out a stalled leader (G9)."""

        async def open_() -> AsyncSession:
            session = await AsyncSession.open(
                self._transport, ttl, self.tenant if tenant is None else tenant,
                on_close=self._sessions.discard,
            )
            self._sessions.add(session)
            return session

        return SessionOpener(open_)

    # -- limits ------------------------------------------------------------------------

    async def define_limit(
        self,
        name: str,
        *,
        concurrent: int = 0,
        per_second: float = 0.0,
        burst: int | None = None,
        tenant: str | None = None,
        keyed: bool = False,
        keys_max: int | None = None,
        shadow: bool = False,
    ) -> None:
        """Defines limit ``name`` or changes its spec: ``concurrent`` units held at once
        (0: no cap), ``per_second`` token refill (0: no rate), ``burst`` bucket size
        (default ``max(per_second, 1)``). ``keyed``: one bucket or semaphore per key, so
        every acquire and take names a ``key``; ``keys_max`` bounds the live keys (and
        implies ``keyed``; the cluster's default is 1000). Whether a limit is keyed is fixed
        at its first definition. ``shadow``: evaluated and counted, never refuses."""
        body = LimitSpec(concurrent, per_second, burst, keyed, keys_max, shadow).to_json()
        await self._transport.call("PUT", f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}",
                                   body)

    async def apply_limits(
        self,
        limits: Mapping[str, LimitSpec],
        *,
        prune: bool = False,
        dry_run: bool = False,
        tenant: str | None = None,
    ) -> LimitsChange:
        """Sets the tenant's limits to ``limits`` (name to spec) in one log entry, all or
        nothing: creates and changes them, and with ``prune`` removes the tenant's other
        limits. A definition that cannot apply refuses the whole apply, naming it
        (:class:`~weir.Invalid`), and nothing changes. With ``dry_run`` the change is read,
        never made. Needs an ``admin`` token where tokens are on, as defining a limit does."""
        body = {
            "limits": {name: spec.to_json() for name, spec in limits.items()},
            "prune": prune,
            "dry_run": dry_run,
        }
        answer = await self._transport.call("PUT", f"/v1/tenants/{self._t(tenant)}/limits",
                                            body)
        return LimitsChange.from_json(_expect_dict(answer, "limits apply"))

    async def place_tenant(self, group: int | None = None, *,
                           tenant: str | None = None) -> int:
        """On a cluster of several Raft groups: places the tenant in data group ``group``
        once and for good (admin), or with no group finds where it lives and places it in
        the default group if nowhere; answers the group it lives in. Another group than the
        one it has raises :class:`~weir.WrongGroup` naming that one. A cluster of one group
        answers 0 for every tenant."""
        answer = await self._transport.call(
            "PUT", f"/v1/tenants/{self._t(tenant)}/placement", {"group": group}
        )
        return int(_expect_dict(answer, "tenant placement")["group"])

    async def show_limit(self, name: str, *, tenant: str | None = None) -> LimitStatus:
        """A limit's spec and use (raises :class:`~weir.UnknownLimit`)."""
        answer = await self._transport.call(
            "GET", f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}"
        )
        return LimitStatus.from_json(_expect_dict(answer, "limit show"))

    async def list_limits(self, *, prefix: str = "",
                          tenant: str | None = None) -> list[LimitStatus]:
        """Every limit of the tenant whose name starts with ``prefix``, by name, read page
        by page (each page linearizable)."""
        limits: list[LimitStatus] = []
        path = f"/v1/tenants/{self._t(tenant)}/limits?prefix={q(prefix)}"
        after: str | None = None
        while True:
            page = path if after is None else f"{path}&after={q(after)}"
            answer = await self._transport.call("GET", page)
            limits += [LimitStatus.from_json(v)
                       for v in _expect_list(answer, "limits", "limit list")]
            after = answer.get("next")
            if after is None:
                return limits
            if not isinstance(after, str):
                raise ProtocolError(f"limit list answered next {after!r}")

    async def key_status(self, name: str, key: str, *, tenant: str | None = None) -> LimitStatus:
        """One key's state of a keyed limit, in the shape of a limit's: a key that is not
        live answers a fresh key's (a full bucket, an idle semaphore), never an error.
        Raises :class:`~weir.UnknownLimit` for a limit that is unknown or not keyed."""
        answer = await self._transport.call(
            "GET", f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}/keys/{q(key)}"
        )
        return LimitStatus.from_json(_expect_dict(answer, "key show"))

    async def keys(self, name: str, *, after: str | None = None, limit: int = 100,
                   tenant: str | None = None) -> KeyPage:
        """One page of a keyed limit's live keys in key order, strictly after ``after``,
        at most ``limit`` (1 to 1000); the page's ``next`` is the ``after`` of the next page
        (``None`` on the last). Raises :class:`~weir.UnknownLimit` for a limit that is
        unknown or not keyed."""
        path = f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}/keys?limit={int(limit)}"
        if after is not None:
            path += f"&after={q(after)}"
        return KeyPage.from_json(_expect_dict(await self._transport.call("GET", path), "keys"))

    async def remove_limit(self, name: str, *, tenant: str | None = None) -> None:
        """Removes a limit; its waiters are refused with :class:`~weir.LimitRemoved`."""
        await self._transport.call("DELETE",
                                   f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}")

    async def fence_held(self, name: str, fence: int, *, tenant: str | None = None) -> bool:
        """Whether a permit with ``fence`` is held on the limit now (linearizable)."""
        answer = await self._transport.call(
            "GET", f"/v1/tenants/{self._t(tenant)}/limits/{q(name)}/fences/{int(fence)}"
        )
        return bool(_expect_dict(answer, "fence check").get("held"))

    # -- takes -------------------------------------------------------------------------

    async def take(
        self,
        name: str,
        units: int = 1,
        *,
        agent: str | None = None,
        tenant: str | None = None,
        wait: float | None = None,
        key: str | None = None,
        parts: list[Part] | None = None,
        lease: AsyncLease | None = None,
    ) -> int | None:
        """Takes ``units`` tokens from a rate-only limit now, or not at all: answers the
        tokens left in the bucket, or raises :class:`~weir.Busy` whose ``retry_after`` says
        in how many seconds the tokens will be there. With ``wait`` (seconds), sleeps for
        ``retry_after`` and tries again while that stays within ``wait``.

        ``key``: the key of a keyed limit. ``parts``: more rate limits of the tenant
        (:class:`~weir.Part`), taken from with ``name`` all or none; a refusal names its
        part (:attr:`~weir.Refused.part`). The tokens left are told for one keyless limit
        only (``None`` for a key or several parts). A cost known only afterwards is held
        and settled with a permit: ``session.acquire(..., estimate=True)``, then
        :meth:`~weir.AsyncPermit.settle`.

        ``lease``: a token lease of this limit (and key), :meth:`AsyncSession.lease`: the
        take is decided locally when the lease has the tokens (answers ``None``, no
        request), else sent to the cluster as without it. A lease is of one limit, so it
        takes no ``parts`` and no ``agent``."""
        tenant = self.tenant if tenant is None else tenant
        if lease is not None:
            lease.check_covers(tenant, name, key, parts, agent)
            return await lease.take(units, wait=wait)
        return await take_from_cluster(self._transport, tenant, name, units, agent=agent,
                                       wait=wait, key=key, parts=parts)

    # -- tenants -----------------------------------------------------------------------

    async def set_tenant(
        self,
        *,
        max_running: int | _Keep | None = KEEP,
        budget_tokens: int | _Keep | None = KEEP,
        budget_minor: int | _Keep | None = KEEP,
        tenant: str | None = None,
    ) -> TenantStatus:
        """Sets a tenant's ceilings: each left at :data:`KEEP` stays, a number sets it,
        ``None`` clears it (no ceiling). Answers the tenant as it is now."""
        body: dict[str, Any] = {}
        for key, value in (
            ("max_running", max_running),
            ("budget_tokens", budget_tokens),
            ("budget_minor", budget_minor),
        ):
            if not isinstance(value, _Keep):
                body[key] = value
        answer = await self._transport.call("PUT", f"/v1/tenants/{self._t(tenant)}", body)
        return TenantStatus.from_json(_expect_dict(answer, "tenant set"))

    async def show_tenant(self, *, tenant: str | None = None) -> TenantStatus:
        """A tenant's ceilings, budgets, running count and halts."""
        answer = await self._transport.call("GET", f"/v1/tenants/{self._t(tenant)}")
        return TenantStatus.from_json(_expect_dict(answer, "tenant show"))

    # -- runs and spend ----------------------------------------------------------------

    async def reserve(
        self,
        run: str,
        *,
        agent: str | None = None,
        period: str | None = None,
        hold_tokens: int | None = None,
        hold_minor: int | None = None,
        tenant: str | None = None,
    ) -> None:
        """Admits ``run`` to a slot of the tenant's running set (idempotent per run), or
        raises :class:`~weir.TooManyRuns`, :class:`~weir.BudgetExhausted` or
        :class:`~weir.Halted`. A hold (``hold_tokens``, ``hold_minor``; needs ``period``)
        reserves that much of the period's budget for the run (G6)."""
        body: dict[str, Any] = {}
        for k, v in (("agent", agent), ("period", period), ("hold_tokens", hold_tokens),
                     ("hold_minor", hold_minor)):
            if v is not None:
                body[k] = v
        await self._transport.call(
            "POST", f"/v1/tenants/{self._t(tenant)}/runs/{q(run)}/reserve", body
        )

    async def release_run(self, run: str, *, tenant: str | None = None) -> None:
        """Frees the run's slot (idempotent)."""
        await self._transport.call("POST",
                                   f"/v1/tenants/{self._t(tenant)}/runs/{q(run)}/release")

    async def settle(
        self,
        run: str,
        *,
        epoch: int,
        period: str | None = None,
        tokens: int = 0,
        minor_units: int = 0,
        release_slot: bool = False,
        tenant: str | None = None,
    ) -> Settlement:
        """Charges one pass of ``run`` to the period, once per ``(run, epoch)``: a retry
        with the same payload answers ``duplicate``; the same key with another payload
        raises :class:`~weir.Conflict`."""
        body: dict[str, Any] = {
            "epoch": epoch,
            "tokens": tokens,
            "minor_units": minor_units,
            "release_slot": release_slot,
        }
        if period is not None:
            body["period"] = period
        answer = await self._transport.call(
            "POST", f"/v1/tenants/{self._t(tenant)}/runs/{q(run)}/settle", body
        )
        return Settlement.from_json(_expect_dict(answer, "settle"))

    async def list_runs(self, *, tenant: str | None = None) -> list[Run]:
        """The running set, with admission times."""
        answer = await self._transport.call("GET", f"/v1/tenants/{self._t(tenant)}/runs")
        return [Run.from_json(v) for v in _expect_list(answer, "runs", "run list")]

    async def spent(self, period: str, *, tenant: str | None = None) -> Spent:
        """Spend charged to ``period``."""
        answer = await self._transport.call(
            "GET", f"/v1/tenants/{self._t(tenant)}/spent/{q(period)}"
        )
        return Spent.from_json(_expect_dict(answer, "spent"))

    # -- halts -------------------------------------------------------------------------

    def _halt_path(self, agent: str | None, tenant: str | None) -> str:
        if agent is None:
            return f"/v1/tenants/{self._t(tenant)}/halt"
        return f"/v1/tenants/{self._t(tenant)}/agents/{q(agent)}/halt"

    async def set_halt(self, reason: str, *, agent: str | None = None,
                       tenant: str | None = None) -> None:
        """Halts the tenant, or one ``agent`` of it: its reserves and acquires are refused,
        its queued tickets refused, and its permit holders told (their permits'
        :meth:`~weir.AsyncPermit.lost` resolves)."""
        await self._transport.call("PUT", self._halt_path(agent, tenant), {"reason": reason})

    async def clear_halt(self, *, agent: str | None = None, tenant: str | None = None) -> None:
        """Clears the tenant's halt, or one agent's."""
        await self._transport.call("DELETE", self._halt_path(agent, tenant))

    async def list_halts(self, *, tenant: str | None = None) -> list[Halt]:
        """The tenant's halts, tenant-wide first."""
        answer = await self._transport.call("GET", f"/v1/tenants/{self._t(tenant)}/halts")
        return [Halt.from_json(v) for v in _expect_list(answer, "halts", "halt list")]

    # -- the cluster -------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """Every member's status as the node asked sees it (``weir status --json``:
        ``{"leader", "term", "nodes": [...]}``). Needs an ``admin`` token when tokens are
        configured."""
        return _expect_dict(await self._transport.call("GET", "/v1/status"), "status")


__all__ = ["KEEP", "AsyncClient", "SessionOpener"]
