"""Typed errors.

Every error is a :class:`WeirError`. Two families matter most to a caller:

- :class:`Refused` — the cluster decided and said no (halted, busy, over a ceiling or a
  budget, unknown limit, ...). Nothing was done. Each subclass carries the refusal's fields
  as attributes (``Halted.scope``, ``BudgetExhausted.spent``, ``Busy.retry_after``), read
  from the server's JSON error body (``{"error": NAME, "message": TEXT, ...fields}``);
  ``fields`` keeps the whole body.
- Failures that say whether the request may have taken effect:
  :class:`OutcomeUnknown` (it was sent and may or may not have been applied; every write
  of the cluster is idempotent, so sending it again is safe) versus :class:`Unavailable`
  (no node served it: it was not applied).

Authentication and authorization: :class:`Unauthenticated` (no or an unknown token, HTTP
401) and :class:`Forbidden` (the token's role may not do it, HTTP 403). An acquire adds
:class:`TimedOut` and :class:`SessionLost`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from .types import HaltScope, Lost, Part


class WeirError(Exception):
    """Any error of this client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def definitely_failed(self) -> bool:
        """Whether the request certainly did not take effect (``False`` only for
        :class:`OutcomeUnknown`)."""
        return True


class OutcomeUnknown(WeirError):
    """The request was sent and may or may not have been applied (a node fell silent or
    the connection broke after it was sent, and retries ran out). Writes are idempotent:
    sending the same one again is safe."""

    @property
    def definitely_failed(self) -> bool:
        return False


class Unavailable(WeirError):
    """No node could serve the request (unreachable, no leader, no quorum); it was not
    applied. Trying again later may succeed."""


class Unauthenticated(WeirError):
    """The cluster requires a token and none, or an unknown one, was sent (HTTP 401)."""


class Forbidden(WeirError):
    """The token's role may not do this (HTTP 403): another tenant, a read-only token
    writing, another principal's session."""


class ProtocolError(WeirError):
    """A node answered something this client does not understand (not HTTP, an
    internal error, an unexpected shape), or TLS verification failed."""


class TimedOut(WeirError):
    """An acquire waited longer than its timeout; its ticket was withdrawn. ``part``: the
    request's first :class:`~weir.Part` that lacked room when read after the wait (its
    limit's status, or its key's), ``None`` when none did or none could be read; the
    message says what each part lacked (``3 of 3 in use, needs 1``)."""

    def __init__(self, message: str, part: Part | None = None) -> None:
        super().__init__(message)
        self.part = part


class SessionLost(WeirError):
    """The session ended (expired or closed) before or while the acquire waited."""

    def __init__(self, message: str, lost: Lost) -> None:
        super().__init__(message)
        self.lost = lost


class Refused(WeirError):
    """The cluster refused the request; nothing was done.

    ``name`` is the refusal's name as the server gives it (``"Halted"``), ``fields`` the
    whole JSON error body, ``status`` the HTTP status code. ``part``: for a refusal of an
    acquire or a take that names one of the request's limits (``UnknownLimit``,
    ``TooLarge``, ``QueueFull``, ``LimitRemoved``), the request's :class:`~weir.Part` of
    that limit (its own limit is the first part), else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        fields: Mapping[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name or type(self).__name__
        self.fields: Mapping[str, Any] = dict(fields or {})
        self.status = status
        self.part: Part | None = None

    def _str(self, key: str) -> str:
        v = self.fields.get(key)
        return "" if v is None else str(v)

    def _int(self, key: str) -> int:
        v = self.fields.get(key)
        return int(v) if isinstance(v, (int, float)) else 0

    @property
    def tenant(self) -> str:
        """The tenant the refusal is about, when it names one (else ``""``)."""
        return self._str("tenant")


class UnknownLimit(Refused):
    """No limit by that (tenant, name)."""

    @property
    def limit(self) -> str:
        return self._str("name")


class UnknownSession(Refused):
    """The session does not exist (never opened, closed, or expired)."""

    @property
    def session(self) -> int:
        return self._int("session")


class Halted(Refused):
    """A halt covers the request: ``scope`` says which (the tenant, or an agent)."""

    @property
    def scope(self) -> HaltScope:
        try:
            return HaltScope.parse(self.fields.get("scope"), self.fields.get("agent"))
        except ValueError:
            return HaltScope()

    @property
    def reason(self) -> str:
        return self._str("reason")


class TooLarge(Refused):
    """More units than the limit could ever grant at once (``max``)."""

    @property
    def limit(self) -> str:
        return self._str("name")

    @property
    def units(self) -> int:
        return self._int("units")

    @property
    def max(self) -> int:
        return self._int("max")


class Busy(Refused):
    """No room now (an acquire with ``wait=False``, or a take). ``retry_after`` is how many
    seconds until a rate bucket has the tokens, or ``None`` when only a release can make
    room."""

    @property
    def retry_at_ms(self) -> int | None:
        v = self.fields.get("retry_at_ms")
        return int(v) if isinstance(v, (int, float)) else None

    def __str__(self) -> str:
        """``busy: retry in 1.2 s`` (seconds from the answer), or the server's text when
        only a release can make room."""
        after = self.retry_after
        if after is None:
            return super().__str__()
        return f"busy: retry in {after:.1f} s"

    @property
    def retry_after(self) -> float | None:
        ms = self.fields.get("retry_after_ms")
        if isinstance(ms, (int, float)):
            return float(ms) / 1000.0
        header = self.fields.get("_retry_after_header")
        if isinstance(header, (int, float)):
            return float(header)
        return None


class LimitRemoved(Refused):
    """The limit was removed while the ticket waited."""

    @property
    def limit(self) -> str:
        return self._str("name")


class QueueFull(Refused):
    """The limit's wait queue is full."""

    @property
    def limit(self) -> str:
        return self._str("name")


class TicketReleased(Refused):
    """The ticket was already released: a late duplicate of its acquire."""

    @property
    def session(self) -> int:
        return self._int("session")

    @property
    def ticket(self) -> int:
        return self._int("ticket")


class TooManyRuns(Refused):
    """The tenant's running set is at its ceiling (``running``)."""

    @property
    def running(self) -> int:
        return self._int("running")


class BudgetExhausted(Refused):
    """The period's budget cannot admit the reserve."""

    @property
    def period(self) -> str:
        return self._str("period")

    @property
    def kind(self) -> str:
        """``"Tokens"`` or ``"MinorUnits"``."""
        return self._str("kind")

    @property
    def spent(self) -> int:
        return self._int("spent")

    @property
    def held(self) -> int:
        return self._int("held")

    @property
    def hold(self) -> int:
        return self._int("hold")

    @property
    def budget(self) -> int:
        return self._int("budget")


class Conflict(Refused):
    """The settlement key (tenant, run, epoch) was used before with another payload."""

    @property
    def run(self) -> str:
        return self._str("run")

    @property
    def epoch(self) -> int:
        return self._int("epoch")


class Invalid(Refused):
    """The request is wrong and will never be admitted as it is (a name too long, units
    out of range, a bad body); the message names the problem."""


class AtCapacity(Refused):
    """A count bound of the cluster is reached (``what``, ``limit``); it may admit the
    request once something is released, closed or expires."""

    @property
    def what(self) -> str:
        return self._str("what")

    @property
    def limit(self) -> int:
        return self._int("limit")


class WrongGroup(Refused):
    """On a cluster of several Raft groups: a session's request for a tenant another group
    decides (a session is its group's; a client of that group, ``group=``, holds the
    tenant's permits), or a placement in another group than the tenant's."""

    @property
    def group(self) -> int:
        """The group the tenant lives in."""
        return self._int("group")


_REFUSALS: dict[str, type[Refused]] = {
    "UnknownLimit": UnknownLimit,
    "UnknownSession": UnknownSession,
    "Halted": Halted,
    "TooLarge": TooLarge,
    "Busy": Busy,
    "LimitRemoved": LimitRemoved,
    "QueueFull": QueueFull,
    "TicketReleased": TicketReleased,
    "TooManyRuns": TooManyRuns,
    "BudgetExhausted": BudgetExhausted,
    "Conflict": Conflict,
    "Invalid": Invalid,
    "BadRequest": Invalid,
    "AtCapacity": AtCapacity,
    "WrongGroup": WrongGroup,
}


def name_part(refused: Refused, parts: Sequence[Part]) -> Refused:
    """Sets ``refused.part`` to the first of the request's ``parts`` whose limit the
    refusal names (its ``name`` field); answers ``refused``."""
    named = refused.fields.get("name")
    refused.part = next((p for p in parts if p.limit == named), None)
    return refused


def refusal(name: str, message: str, fields: Mapping[str, Any] | None = None,
            status: int | None = None) -> Refused:
    """The typed refusal for the server's refusal ``name``."""
    cls = _REFUSALS.get(name, Refused)
    return cls(message, name=name, fields=fields, status=status)


def from_response(status: int, body: object, retry_after: str | None = None) -> WeirError:
    """The error for an HTTP error answer (status >= 400) whose JSON body is ``body``."""
    fields: dict[str, Any] = dict(body) if isinstance(body, Mapping) else {}
    name = str(fields.get("error", ""))
    message = str(fields.get("message", "")) or f"HTTP {status}"
    if retry_after is not None:
        with contextlib.suppress(ValueError):
            fields["_retry_after_header"] = float(retry_after)
    if status == 401 or name == "Unauthenticated":
        return Unauthenticated(message)
    if status == 403 or name == "Forbidden":
        return Forbidden(message)
    if name in ("NoLeader", "Unavailable"):
        return Unavailable(f"{name}: {message}")
    if name == "OutcomeUnknown":
        return OutcomeUnknown(message)
    if name in _REFUSALS:
        return refusal(name, message, fields, status)
    if status >= 500 or not name or name in ("NotFound", "MethodNotAllowed", "Internal"):
        return ProtocolError(f"HTTP {status} {name}: {message}".strip())
    return refusal(name, message, fields, status)
