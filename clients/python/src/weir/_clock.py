"""The clock the belief deadline is kept on, and the deadline arithmetic (G2).

``CLOCK_BOOTTIME`` counts the time the machine spends suspended; the monotonic clock does
not. The cluster's clocks, and so the leases, go on during a suspend, so a deadline on the
monotonic clock would let a client that resumes believe in permits whose lease ran out in
real time. Where the platform has no ``CLOCK_BOOTTIME`` (macOS, Windows) the monotonic
clock is used, with that caveat.

asyncio's timers run on the monotonic clock: they only decide when to *look*; every
decision compares against :func:`boot_now`, and a wait on the deadline looks again at
least every :data:`LOOK_EVERY`.

The rules are the Rust library's (``src/client/session.rs``):

- a session sends a keep-alive every TTL/5 (:data:`KEEPALIVES_PER_TTL`);
- the margin is a tenth of the TTL, at least 100 ms (:func:`margin_for`);
- after a keep-alive (or the open) *sent* at ``sent`` is acknowledged, the belief deadline
  becomes ``sent + TTL - margin`` (:func:`deadline_after`), and only ever moves later.
"""

from __future__ import annotations

import time

#: Longest a wait on the belief deadline sleeps before it looks at the clock again, so a
#: deadline that passed during a suspend is noticed within this long of resuming (seconds).
LOOK_EVERY = 0.25

#: Keep-alives sent per TTL.
KEEPALIVES_PER_TTL = 5


def _boottime_works() -> bool:
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is None:
        return False
    try:
        time.clock_gettime(clock)
    except OSError:
        return False
    return True


if _boottime_works():
    #: Which clock :func:`boot_now` reads.
    CLOCK_NAME = "CLOCK_BOOTTIME"

    def boot_now() -> float:
        """Seconds on CLOCK_BOOTTIME (counts suspended time)."""
        return time.clock_gettime(time.CLOCK_BOOTTIME)

else:  # pragma: no cover - not Linux
    CLOCK_NAME = "monotonic"

    def boot_now() -> float:
        """Seconds on the monotonic clock (this platform has no CLOCK_BOOTTIME)."""
        return time.monotonic()


def margin_for(ttl: float) -> float:
    """The safety margin subtracted from the TTL, in seconds: a tenth of the TTL, at least
    100 ms. It covers a clock-rate drift between this client and the leaders far larger
    than NTP-disciplined clocks show."""
    return max(ttl / 10.0, 0.1)


def deadline_after(sent: float, ttl: float) -> float:
    """The belief deadline after a keep-alive (or open) sent at ``sent`` (on
    :func:`boot_now`) was acknowledged: the cluster cannot expire the session before
    ``sent + ttl``, less the margin."""
    return sent + ttl - margin_for(ttl)


def believed_at(deadline: float, now: float) -> bool:
    """Whether a permit under ``deadline`` is still believed held at ``now``."""
    return now < deadline
