"""Weir's Python client: sessions kept alive, permits with fences and ``lost()``, rate
takes, run slots, budgets and halts, over the cluster's HTTP/JSON API.

The belief rule (G2): a permit is believed held from its grant until its release is sent,
or until the session's belief deadline passes: the send time of the last acknowledged
keep-alive plus the TTL minus a margin (a tenth of the TTL, at least 100 ms), on
CLOCK_BOOTTIME where the platform has it (else the monotonic clock). The cluster cannot
expire the session before then, so no two clients believe they hold more than a limit
grants. :meth:`AsyncPermit.lost` resolves when the belief ends (or a halt covers the
permit, or the session expired or was closed).

Token leases (:meth:`AsyncSession.lease`, :class:`AsyncLease`): a share of a rate limit
spent locally, without a request per take, and only while the same belief deadline holds
(``_lease.py``).

asyncio: :class:`AsyncClient`, :class:`AsyncSession`, :class:`AsyncPermit`,
:class:`AsyncLease`. Blocking: :class:`Client`, :class:`Session`, :class:`Permit`,
:class:`Lease` (the same, run on a thread).
"""

from ._client import KEEP, AsyncClient, SessionOpener
from ._clock import CLOCK_NAME, believed_at, boot_now, deadline_after, margin_for
from ._lease import AsyncLease, LeaseFigures, LeaseOpener
from ._session import AcquireContext, AsyncPermit, AsyncSession
from ._sync import Client, Lease, Permit, Session
from ._version import __version__
from .errors import (
    AtCapacity,
    BudgetExhausted,
    Busy,
    Conflict,
    Forbidden,
    Halted,
    Invalid,
    LimitRemoved,
    OutcomeUnknown,
    ProtocolError,
    QueueFull,
    Refused,
    SessionLost,
    TicketReleased,
    TimedOut,
    TooLarge,
    TooManyRuns,
    Unauthenticated,
    Unavailable,
    UnknownLimit,
    UnknownSession,
    WeirError,
    WrongGroup,
)
from .types import (
    TENANT,
    CostSettlement,
    Halt,
    HaltScope,
    KeyPage,
    LimitsChange,
    LimitSpec,
    LimitStatus,
    Lost,
    LostKind,
    Part,
    PartSettlement,
    Priority,
    Run,
    Settlement,
    Spent,
    TenantStatus,
)

__all__ = [
    "CLOCK_NAME",
    "KEEP",
    "TENANT",
    "AcquireContext",
    "AsyncClient",
    "AsyncLease",
    "AsyncPermit",
    "AsyncSession",
    "AtCapacity",
    "BudgetExhausted",
    "Busy",
    "Client",
    "Conflict",
    "CostSettlement",
    "Forbidden",
    "Halt",
    "HaltScope",
    "Halted",
    "Invalid",
    "KeyPage",
    "Lease",
    "LeaseFigures",
    "LeaseOpener",
    "LimitRemoved",
    "LimitSpec",
    "LimitStatus",
    "LimitsChange",
    "Lost",
    "LostKind",
    "OutcomeUnknown",
    "Part",
    "PartSettlement",
    "Permit",
    "Priority",
    "ProtocolError",
    "QueueFull",
    "Refused",
    "Run",
    "Session",
    "SessionLost",
    "SessionOpener",
    "Settlement",
    "Spent",
    "TenantStatus",
    "TicketReleased",
    "TimedOut",
    "TooLarge",
    "TooManyRuns",
    "Unauthenticated",
    "Unavailable",
    "UnknownLimit",
    "UnknownSession",
    "WeirError",
    "WrongGroup",
    "__version__",
    "believed_at",
    "boot_now",
    "deadline_after",
    "margin_for",
]
