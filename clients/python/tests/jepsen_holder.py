"""A permit holder of the partition harness (``weir-jepsen --python-holders N``), written
the way an application holds permits with this client, recording what it believed.

The harness starts one of these per Python holder, as a process of its own beside its
Rust holders on the same limit, and reads its history from stdout: one JSON object per
line, in the harness's own op format (``process``, ``kind``, ``f``, ``value``,
``time_ns``), which it records as they come. Times are on the harness's clock: this
process is given the harness's start on CLOCK_BOOTTIME (``--epoch-boot-ns``) and counts
from it on the same clock the client keeps its belief deadline on, so a recorded deadline
is the client's own, not one re-derived here.

Each turn, as the Rust permit workload does: open a session (again after one ends),
acquire one unit of the limit (waiting at most 5 s), hold it for a seeded time while
racing the work against ``permit.lost()`` and checking ``permit.lost_reason()`` before
each step of work, then release. Recorded: the ``acquire`` op (invoke; ok with the fence
and the invoke time, fail or info), the ``hold`` fact, and the ``release`` op (ok, or info
when its outcome is unknown). The ``hold`` is the belief as the application saw it: from
the grant to the moment the client first told it that the permit may be lost
(``lost_reason()`` answering or ``lost()`` resolving: ``told_ns``), or to the release being
sent if it never was; beside it the client's own deadline (``deadline_ns``), so the
harness's ``told`` check sees a client that tells the application late. A permit held
through a pause (below) is recorded as G2 defines the belief (to the deadline, if that
came first) with ``"application": false``: nothing ran in the process to be told while
it stood still; what it was told after it resumed (``resumed_ns``, ``told_ns``) is judged
by ``told`` from the resume. Not told at the resume, it works on for a TTL before it
releases, as an application that believes it holds would.

With ``--pause-every K``, every K-th permit is held through a stop-the-world pause
(``--pause-ms``, a blocking sleep on the event loop, keep-alives included) between the
check of ``lost_reason()`` and the next step of work, as a stalled process would; the
pause is recorded as a ``client-pause`` fact (its deadline, when it resumed, and what
``lost_reason()`` said then). A pause past the TTL lets the session expire and the permit
go to another holder: a correct client's belief ended at its deadline, before that grant.

The run ends when stdin closes (the harness stops its workloads): the holder releases
what it holds, closes its session and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import weir

#: Longest an acquire waits before it is recorded as failed and asked again (s).
ACQUIRE_WAIT = 5.0
#: Longest a release is waited for before it is recorded as of unknown outcome (s).
RELEASE_WAIT = 3.0
#: One step of work between two checks of the permit (s).
STEP = 0.01


@dataclass
class Args:
    servers: list[str]
    tenant: str
    limit: str
    cap: int
    process: int
    seed: int
    epoch_boot_ns: int
    ttl: float
    hold_ms: tuple[int, int]
    pause_every: int
    pause_ms: tuple[int, int]


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    return int(lo), int(hi or lo)


def parse(argv: list[str]) -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--servers", required=True, help="the nodes' HTTP addresses, comma separated")
    p.add_argument("--tenant", default="jepsen")
    p.add_argument("--limit", required=True)
    p.add_argument("--cap", type=int, required=True, help="the limit's concurrent, recorded")
    p.add_argument("--process", type=int, required=True, help="its process number")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epoch-boot-ns", type=int, required=True,
                   help="the harness's time 0 on CLOCK_BOOTTIME, ns")
    p.add_argument("--ttl-ms", type=int, default=3000)
    p.add_argument("--hold-ms", type=_range, default=(10, 150))
    p.add_argument("--pause-every", type=int, default=0, help="0: never pause")
    p.add_argument("--pause-ms", type=_range, default=(4000, 5500))
    a = p.parse_args(argv)
    return Args(
        servers=[s for s in a.servers.split(",") if s], tenant=a.tenant, limit=a.limit,
        cap=a.cap, process=a.process, seed=a.seed, epoch_boot_ns=a.epoch_boot_ns,
        ttl=a.ttl_ms / 1000.0, hold_ms=a.hold_ms, pause_every=a.pause_every,
        pause_ms=a.pause_ms,
    )


class History:
    """Writes this process's ops to stdout, on the harness's clock."""

    def __init__(self, process: int, epoch_boot_ns: int) -> None:
        self.process = process
        self.epoch_boot_ns = epoch_boot_ns

    def ns(self, boot_s: float) -> int:
        """The harness time of an instant of :func:`weir.boot_now` (at least 0)."""
        return max(0, round(boot_s * 1e9) - self.epoch_boot_ns)

    def now(self) -> int:
        return self.ns(weir.boot_now())

    def record(self, kind: str, f: str, value: dict[str, Any], at: int | None = None) -> int:
        at = self.now() if at is None else at
        op = {"process": self.process, "kind": kind, "f": f, "value": value, "time_ns": at}
        sys.stdout.write(json.dumps(op) + "\n")
        sys.stdout.flush()
        return at


class Holder:
    """One holder: sessions, acquires, holds and releases, recorded."""

    def __init__(self, args: Args, client: weir.AsyncClient, stop: asyncio.Event) -> None:
        self.a = args
        self.client = client
        self.stop = stop
        self.h = History(args.process, args.epoch_boot_ns)
        self.rng = random.Random(args.seed)
        self.held = 0
        #: When the last pause ended (harness ns), if the permit was held through one.
        self.resumed: int | None = None

    async def run(self) -> None:
        while not self.stop.is_set():
            try:
                session = await self.client.session(ttl=self.a.ttl)
            except weir.WeirError:
                await asyncio.sleep(0.1)
                continue
            try:
                while not self.stop.is_set() and await self.turn(session):
                    pass
            finally:
                # Not confirmed in time: it expires after its TTL.
                with contextlib.suppress(weir.WeirError, TimeoutError):
                    await asyncio.wait_for(session.close(), RELEASE_WAIT)

    async def turn(self, session: weir.AsyncSession) -> bool:
        """One acquire, hold and release; ``False`` when the session is done for."""
        limit = self.a.limit
        invoked = self.h.record("invoke", "acquire", {"limit": limit})
        try:
            permit = await session.acquire(limit, timeout=ACQUIRE_WAIT)
        except weir.TimedOut:
            self.h.record("fail", "acquire", {"limit": limit, "error": "timed out"})
            return True
        except weir.SessionLost:
            self.h.record("fail", "acquire", {"limit": limit, "error": "session lost"})
            return False
        except weir.WeirError as e:
            # Refused (nothing held) or outcome unknown: either way a new session.
            kind = "fail" if isinstance(e, weir.Refused) else "info"
            self.h.record(kind, "acquire", {"limit": limit, "error": str(e)})
            return False
        granted = self.h.record(
            "ok", "acquire", {"limit": limit, "fence": permit.fence, "invoke_ns": invoked}
        )
        self.held += 1
        pause = self.a.pause_every > 0 and self.held % self.a.pause_every == 0
        lost = await self.work(session, permit, pause)
        self.belief_ended(session, permit, granted, lost, pause)
        await self.release(permit)
        return session.ended is None

    async def work(
        self, session: weir.AsyncSession, permit: weir.AsyncPermit, pause: bool
    ) -> weir.Lost | None:
        """Holds the permit for a seeded time in steps, each raced against ``lost()`` and
        preceded by ``lost_reason()``; answers why the permit was lost, if it was."""
        steps = max(1, round(self.rng.uniform(*self.a.hold_ms) / 1000.0 / STEP))
        lost_task = asyncio.ensure_future(permit.lost())
        self.resumed = None
        i = 0
        try:
            while i < steps:
                why = permit.lost_reason()
                if why is not None:
                    return why
                if pause and i == steps // 2:
                    # Once a hold: the steps grow below, and a second pause would hide what
                    # the application was told after the first resume.
                    pause = False
                    why = self.stall(session, permit)
                    if why is not None:
                        return why
                    # Not told at the resume: work on for a TTL, as an application that
                    # believes it holds does, so a client that tells it late is seen.
                    steps = i + 1 + round(self.a.ttl / STEP)
                i += 1
                step = asyncio.ensure_future(asyncio.sleep(STEP))
                done, _ = await asyncio.wait({step, lost_task},
                                             return_when=asyncio.FIRST_COMPLETED)
                if lost_task in done:
                    step.cancel()
                    return lost_task.result()
            return permit.lost_reason()
        finally:
            lost_task.cancel()

    def stall(self, session: weir.AsyncSession, permit: weir.AsyncPermit) -> weir.Lost | None:
        """A stop-the-world pause of the whole process (a blocking sleep: the event loop,
        keep-alives included, stands still), then a look at the permit, recorded."""
        ms = self.rng.randint(*self.a.pause_ms)
        deadline = self.h.ns(session.deadline)
        time.sleep(ms / 1000.0)
        resumed = self.resumed = self.h.now()
        why = permit.lost_reason()
        self.h.record("ok", "client-pause", {
            "limit": self.a.limit, "fence": permit.fence, "ms": ms, "deadline_ns": deadline,
            "resumed_ns": resumed, "lost": None if why is None else str(why),
        }, at=resumed)
        return why

    def belief_ended(self, session: weir.AsyncSession, permit: weir.AsyncPermit,
                     granted: int, lost: weir.Lost | None, paused: bool) -> None:
        """Records the belief, now (the loss was just told, or the release is about to be
        sent): to the moment it was told, else to now; a paused one to the session's
        deadline if that passed first."""
        seen = self.h.now()
        deadline = self.h.ns(session.deadline)
        told = None if lost is None else seen
        to = max(granted, min(seen, deadline) if paused else seen)
        self.h.record("ok", "hold", {
            "limit": self.a.limit, "cap": self.a.cap, "fence": permit.fence,
            "from_ns": granted, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline,
            "told_ns": told, "lost": None if lost is None else str(lost),
            "application": not paused, "resumed_ns": self.resumed if paused else None,
            "client": "python",
        }, at=seen)

    async def release(self, permit: weir.AsyncPermit) -> None:
        v = {"limit": self.a.limit, "fence": permit.fence}
        self.h.record("invoke", "release", v)
        try:
            await asyncio.wait_for(permit.release(), RELEASE_WAIT)
            kind = "ok"
        except (weir.WeirError, TimeoutError):
            kind = "info"  # retried in the background; the lease lapses otherwise
        self.h.record(kind, "release", v)


async def stdin_closed(stop: asyncio.Event) -> None:
    """Sets ``stop`` when stdin reaches its end (the harness closed it)."""
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    stop.set()


async def main(argv: list[str]) -> int:
    args = parse(argv)
    if weir.CLOCK_NAME != "CLOCK_BOOTTIME":
        print("jepsen_holder: the harness's clock is CLOCK_BOOTTIME, which this platform "
              "lacks", file=sys.stderr)
        return 2
    # The client's own account (keep-alives failed or hedged, nodes passed over) goes to
    # stderr, which the harness keeps as python-holder-N.log, stamped on the history's clock.
    history = History(args.process, args.epoch_boot_ns)

    class Stamp(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"{history.now()} {record.levelname} {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Stamp())
    logging.getLogger("weir").addHandler(handler)
    logging.getLogger("weir").setLevel(logging.INFO)
    stop = asyncio.Event()
    watcher = asyncio.ensure_future(stdin_closed(stop))
    async with weir.AsyncClient(args.servers, tenant=args.tenant) as client:
        await Holder(args, client, stop).run()
    watcher.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
