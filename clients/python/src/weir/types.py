"""Plain values the client hands back: limit and tenant figures, halts, runs, spend, why a
permit may be lost, priorities.

Every value built from a server answer keeps the answer itself in ``raw``: the server may
add keys, and a caller can read them there before this package names them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HaltScope:
    """What a halt covers: the whole tenant (``agent is None``) or one agent in it."""

    agent: str | None = None

    @property
    def is_tenant(self) -> bool:
        return self.agent is None

    def __str__(self) -> str:
        return "tenant" if self.agent is None else f"agent {self.agent}"

    @classmethod
    def parse(cls, value: object, agent: object = None) -> HaltScope:
        """Reads a scope as the server writes it: ``"Tenant"`` or ``{"Agent": NAME}`` in a
        refusal, ``"tenant"`` or ``"agent NAME"`` in an event, ``"tenant"`` or ``"agent"``
        with a separate ``agent`` key in a halt list."""
        if isinstance(value, Mapping):
            name = value.get("Agent", value.get("agent"))
            return cls(agent=str(name)) if name is not None else cls()
        if isinstance(value, str):
            text = value.strip()
            low = text.lower()
            if low == "tenant":
                return cls()
            if low == "agent":
                return cls(agent=str(agent) if agent is not None else "")
            if low.startswith("agent "):
                return cls(agent=text[len("agent ") :])
        raise ValueError(f"not a halt scope: {value!r}")


TENANT = HaltScope()
"""The scope of a tenant-wide halt."""


@dataclass(frozen=True)
class Halt:
    """One halt of a tenant."""

    scope: HaltScope
    reason: str

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Halt:
        return cls(
            scope=HaltScope.parse(value.get("scope"), value.get("agent")),
            reason=str(value.get("reason", "")),
        )


class LostKind(enum.Enum):
    """Why a permit may no longer be held."""

    #: No keep-alive was acknowledged in time: past the conservative belief deadline the
    #: cluster may already have expired the session.
    DEADLINE = "deadline"
    #: A halt covers the permit. It stays held until released; the work should stop.
    HALTED = "halted"
    #: The session expired on the cluster.
    EXPIRED = "expired"
    #: The session was closed.
    CLOSED = "closed"
    #: Another permit of the same ticket (asked again with ``ticket=``) was released: the
    #: ticket is no longer the session's.
    RELEASED = "released"


@dataclass(frozen=True)
class Lost:
    """Why a permit may no longer be held: a value to act on, never text to match."""

    kind: LostKind
    #: The halt's scope, for :attr:`LostKind.HALTED`.
    scope: HaltScope | None = None
    #: The halt's reason, for :attr:`LostKind.HALTED`.
    reason: str | None = None

    def __str__(self) -> str:
        if self.kind is LostKind.DEADLINE:
            return "lease deadline passed without a keep-alive"
        if self.kind is LostKind.HALTED:
            return f"halted ({self.scope}): {self.reason}"
        if self.kind is LostKind.EXPIRED:
            return "session expired"
        if self.kind is LostKind.RELEASED:
            return "released through another permit of its ticket"
        return "session closed"


LOST_DEADLINE = Lost(LostKind.DEADLINE)
LOST_EXPIRED = Lost(LostKind.EXPIRED)
LOST_CLOSED = Lost(LostKind.CLOSED)
LOST_RELEASED = Lost(LostKind.RELEASED)


@dataclass(frozen=True)
class Priority:
    """Where a waiting ticket queues: ``level`` first (higher first), then weighted fair
    shares across ``fairness_key`` values (first come within a key)."""

    level: int = 0
    fairness_key: str = ""
    weight: int = 1


@dataclass(frozen=True)
class Part:
    """One limit of a request naming several (``parts=`` of an acquire or a take):
    ``units`` of ``limit``, of its ``key`` when the limit is keyed. The request's own limit
    comes first; all its parts are decided in one entry, granted under one fence or none
    charged (a refusal by one part charges none of the others)."""

    limit: str
    units: int = 1
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The part as the API takes it: ``{"limit", "key", "units"}``."""
        return {"limit": self.limit, "key": self.key, "units": self.units}


@dataclass(frozen=True)
class LimitSpec:
    """A limit's spec, as defined: ``concurrent`` units held at once (0: no cap),
    ``per_second`` token refill (0: no rate), ``burst`` bucket size (``None``: the
    cluster's default, ``max(per_second, 1)``); ``keyed`` (one bucket or semaphore per key)
    or ``keys_max`` (that, with a bound on live keys); ``shadow`` (evaluated and counted,
    never refuses)."""

    concurrent: int = 0
    per_second: float = 0.0
    burst: int | None = None
    keyed: bool = False
    keys_max: int | None = None
    shadow: bool = False

    def to_json(self) -> dict[str, Any]:
        """The spec as the API takes it (fields left at their defaults are left out)."""
        body: dict[str, Any] = {"concurrent": self.concurrent, "per_second": self.per_second}
        if self.burst is not None:
            body["burst"] = self.burst
        if self.keyed or self.keys_max is not None:
            body["keyed"] = True
        if self.keys_max is not None:
            body["keys_max"] = self.keys_max
        if self.shadow:
            body["shadow"] = True
        return body


@dataclass(frozen=True)
class LimitsChange:
    """What an apply of a tenant's limits did (or, for a dry run, would do): the names
    created, changed, removed and left unchanged, each in name order, and whether it was
    applied (``False`` for a dry run)."""

    created: list[str]
    changed: list[str]
    removed: list[str]
    unchanged: list[str]
    applied: bool

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> LimitsChange:
        return LimitsChange(
            created=[str(n) for n in d["created"]],
            changed=[str(n) for n in d["changed"]],
            removed=[str(n) for n in d["removed"]],
            unchanged=[str(n) for n in d["unchanged"]],
            applied=bool(d["applied"]),
        )


@dataclass(frozen=True)
class LimitStatus:
    """A limit's spec and use, as ``weir limit show --json`` prints it."""

    tenant: str
    name: str
    concurrent: int
    per_second: float
    burst: int
    in_use: int
    waiting: int
    max_in_use: int
    tokens: int | None
    removing: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> LimitStatus:
        return cls(
            tenant=str(v.get("tenant", "")),
            name=str(v.get("name", "")),
            concurrent=int(v.get("concurrent", 0)),
            per_second=float(v.get("per_second", 0.0)),
            burst=int(v.get("burst", 0)),
            in_use=int(v.get("in_use", 0)),
            waiting=int(v.get("waiting", 0)),
            max_in_use=int(v.get("max_in_use", 0)),
            tokens=None if v.get("tokens") is None else int(v["tokens"]),
            removing=bool(v.get("removing", False)),
            raw=dict(v),
        )


def _opt_int(v: object) -> int | None:
    return None if v is None else int(v)  # type: ignore[call-overload]


@dataclass(frozen=True)
class TenantStatus:
    """A tenant's ceilings, budgets, running count and halts. ``None``: no ceiling."""

    tenant: str
    max_running: int | None
    budget_tokens: int | None
    budget_minor: int | None
    running: int
    halts: tuple[Halt, ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> TenantStatus:
        return cls(
            tenant=str(v.get("tenant", "")),
            max_running=_opt_int(v.get("max_running")),
            budget_tokens=_opt_int(v.get("budget_tokens")),
            budget_minor=_opt_int(v.get("budget_minor")),
            running=int(v.get("running", 0)),
            halts=tuple(Halt.from_json(h) for h in v.get("halts", [])),
            raw=dict(v),
        )


@dataclass(frozen=True)
class Run:
    """A run in its tenant's running set, with when it was admitted (to find a stranded
    slot)."""

    run: str
    agent: str | None
    admitted_at_wall_ms: int
    admitted_at_log_ms: int

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> Run:
        agent = v.get("agent")
        return cls(
            run=str(v.get("run", "")),
            agent=None if agent is None else str(agent),
            admitted_at_wall_ms=int(v.get("admitted_at_wall_ms", 0)),
            admitted_at_log_ms=int(v.get("admitted_at_log_ms", 0)),
        )


@dataclass(frozen=True)
class Spent:
    """Spend charged to a tenant's period."""

    tenant: str
    period: str
    tokens: int
    minor_units: int
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> Spent:
        return cls(
            tenant=str(v.get("tenant", "")),
            period=str(v.get("period", "")),
            tokens=int(v.get("tokens", 0)),
            minor_units=int(v.get("minor_units", 0)),
            raw=dict(v),
        )


@dataclass(frozen=True)
class Settlement:
    """How a settlement was applied: charged now, a ``duplicate`` of one applied before
    (same key and payload: a no-op), and what passed the run's hold (G6: an overrun is
    charged, recorded and reported)."""

    duplicate: bool
    overrun_tokens: int = 0
    overrun_minor_units: int = 0

    @property
    def overrun(self) -> bool:
        return self.overrun_tokens > 0 or self.overrun_minor_units > 0

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> Settlement:
        if v.get("status") == "overrun":
            return cls(
                duplicate=False,
                overrun_tokens=int(v.get("overrun_tokens", 0)),
                overrun_minor_units=int(v.get("overrun_minor_units", 0)),
            )
        return cls(duplicate=bool(v.get("duplicate", False)))


@dataclass(frozen=True)
class PartSettlement:
    """How one part of a permit acquired with ``estimate=True`` was settled: its
    ``estimate`` (the part's own units) replaced by the cost, ``returned_tokens`` (the
    estimate less the cost, when below it) gone back to its bucket (never above its burst).
    A part whose limit does not rate holds no estimate: both are ``None``."""

    part: Part
    estimate: int | None
    returned_tokens: int | None


@dataclass(frozen=True)
class CostSettlement:
    """How a permit acquired with ``estimate=True`` was settled at its actual ``cost``
    (:meth:`weir.AsyncPermit.settle`). Each rate part's estimate is replaced by the cost:
    below it the unused tokens go back to the part's bucket (never above its burst), above
    it the difference is charged as far as the bucket holds and reported
    (``overrun_tokens``, the largest over the parts). A ``duplicate`` is a settlement of a
    permit settled before: nothing changed.

    ``parts`` tells each part's estimate and returned tokens, the request's own limit
    first; ``estimate`` and ``returned_tokens`` are their sums over the rate parts (of a
    permit of one limit, that limit's). A duplicate returned nothing."""

    cost: int
    duplicate: bool
    overrun_tokens: int
    estimate: int | None
    returned_tokens: int | None
    parts: tuple[PartSettlement, ...] = ()

    @classmethod
    def from_json(cls, v: Mapping[str, Any], cost: int,
                  estimates: Sequence[tuple[Part, int | None]]) -> CostSettlement:
        """The settlement ``v`` answered, with ``estimates``: each part and its estimate
        (``None`` for a part that does not rate)."""
        overrun = int(v.get("overrun_tokens", 0)) if v.get("status") == "overrun" else 0
        duplicate = bool(v.get("duplicate", False)) and overrun == 0
        parts = tuple(
            PartSettlement(part, estimate, None if estimate is None
                           else 0 if duplicate else max(0, estimate - cost))
            for part, estimate in estimates
        )
        rated = [p for p in parts if p.estimate is not None]
        if not rated:
            return cls(cost, duplicate, overrun, None, None, parts)
        return cls(cost, duplicate, overrun, sum(p.estimate or 0 for p in rated),
                   sum(p.returned_tokens or 0 for p in rated), parts)


@dataclass(frozen=True)
class KeyPage:
    """One page of a keyed limit's live keys, in key order (:meth:`weir.AsyncClient.keys`):
    ``next`` is the key to ask ``after`` for the next page, ``None`` on the last."""

    keys: list[str]
    next: str | None

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> KeyPage:
        nxt = v.get("next")
        return cls([str(k) for k in v.get("keys", [])], None if nxt is None else str(nxt))
