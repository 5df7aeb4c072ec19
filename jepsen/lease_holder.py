"""A token-lease holder running the Python client, for the partition harness.

The twin of the harness's Rust lease holders (``jepsen/src/workload/leased.rs``): it lives a
string of lives, each a session (the harness's TTL) and a lease of ``--limit``
(``session.lease``), taking one token at a time as fast as it can: from the local bucket
(``lease.try_take``, no network), else by the fallback to the cluster (``lease.take``,
waited for at most 0.5 s), 50-100 ms apart after a refusal. Each take is a ``lease-take``
op on stdout, in the history's own format and on the harness's clock (its time 0 on
CLOCK_BOOTTIME is ``--epoch-boot-ns``): its invoke just before the decision, its ok just
after, ``"local"`` saying which bucket it came from. A life lasts 1-3 s and ends, drawn from
``--seed``: by giving the lease up and closing the session; by closing the session under
the lease (the lease ends with it, counted as spent); or by a stall of the whole event loop
for the TTL + 0.2-1 s (a blocking sleep), then taking again at once. ``lease`` facts record
each life's start and end.

The run ends when stdin closes (the harness stops its workloads).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from typing import Any

import weir

#: How long a take by the fallback is waited for (s).
FALLBACK_WAIT = 0.5


class History:
    """Writes this process's ops to stdout, on the harness's clock."""

    def __init__(self, process: int, epoch_boot_ns: int) -> None:
        self.process = process
        self.epoch_boot_ns = epoch_boot_ns

    def now(self) -> int:
        return max(0, round(weir.boot_now() * 1e9) - self.epoch_boot_ns)

    def record(self, kind: str, f: str, value: dict[str, Any]) -> int:
        at = self.now()
        op = {"process": self.process, "kind": kind, "f": f, "value": value, "time_ns": at}
        sys.stdout.write(json.dumps(op) + "\n")
        sys.stdout.flush()
        return at


async def life(a: argparse.Namespace, client: weir.AsyncClient, h: History,
               rng: random.Random, stop: asyncio.Event) -> None:
    try:
        session = await client.session(ttl=a.ttl_ms / 1000.0)
    except Exception:  # the cluster may be faulted: another life tries again
        await asyncio.sleep(0.1)
        return
    try:
        lease = await session.lease(a.limit, rate_per_s=a.rate, cap=a.cap)
    except Exception as e:
        h.record("info", "lease", {"event": "refused", "limit": a.limit, "error": str(e)})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(session.close(), 2.0)
        await asyncio.sleep(0.2)
        return
    h.record("info", "lease", {"event": "open", "limit": a.limit, "client": "python"})
    draw = rng.randrange(10)
    end = "stall" if draw < 2 else "close" if draw < 5 else "end"
    length = rng.uniform(1.0, 3.0)
    stall_at = rng.uniform(0.3, 1.0)
    started = time.monotonic()
    stalled = False
    ok = {"limit": a.limit, "units": 1, "per_second": a.per_second, "burst": a.burst}
    while not stop.is_set() and time.monotonic() - started < length:
        if end == "stall" and not stalled and time.monotonic() - started >= stall_at:
            stalled = True
            ms = a.ttl_ms + rng.randrange(200, 1001)
            h.record("info", "lease", {"event": "stall", "limit": a.limit, "ms": ms})
            time.sleep(ms / 1000.0)  # noqa: ASYNC251 - the whole event loop stops, on purpose
        invoked = h.record("invoke", "lease-take", {"limit": a.limit, "units": 1})
        if lease.try_take(1):
            h.record("ok", "lease-take", {**ok, "invoke_ns": invoked, "local": True})
            await asyncio.sleep(0)
            continue
        local_before = lease.figures.local
        try:
            await asyncio.wait_for(lease.take(1), FALLBACK_WAIT)
            local = lease.figures.local > local_before
            h.record("ok", "lease-take", {**ok, "invoke_ns": invoked, "local": local})
        except weir.Busy:
            h.record("fail", "lease-take", {"limit": a.limit, "error": "busy"})
            await asyncio.sleep(rng.uniform(0.05, 0.1))
        except TimeoutError:
            h.record("info", "lease-take", {"limit": a.limit, "error": "no answer within 0.5 s"})
            await asyncio.sleep(rng.uniform(0.05, 0.1))
        except Exception as e:  # the session is gone for this life
            h.record("info", "lease-take", {"limit": a.limit, "error": str(e)})
            break
    figures = lease.figures
    fact = {"limit": a.limit, "local": figures.local, "requests": figures.requests,
            "client": "python"}
    if end == "close":
        h.record("info", "lease", {**fact, "event": "close"})
    else:
        h.record("info", "lease", {**fact, "event": "end"})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(lease.end(), 2.0)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(session.close(), 2.0)


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", required=True)
    p.add_argument("--tenant", default="jepsen")
    p.add_argument("--limit", required=True)
    p.add_argument("--per-second", type=float, required=True, help="the limit's, recorded")
    p.add_argument("--burst", type=int, required=True, help="the limit's, recorded")
    p.add_argument("--rate", type=float, required=True, help="the lease's wanted rate")
    p.add_argument("--cap", type=int, required=True, help="the lease's wanted cap")
    p.add_argument("--process", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epoch-boot-ns", type=int, required=True)
    p.add_argument("--ttl-ms", type=int, default=3000)
    a = p.parse_args(argv)
    if weir.CLOCK_NAME != "CLOCK_BOOTTIME":
        print("lease_holder: the harness's clock is CLOCK_BOOTTIME", file=sys.stderr)
        return 2
    h = History(a.process, a.epoch_boot_ns)
    rng = random.Random(a.seed)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    watcher = loop.run_in_executor(None, sys.stdin.read)
    watcher.add_done_callback(lambda _: loop.call_soon_threadsafe(stop.set))
    servers = [s for s in a.servers.split(",") if s]
    async with weir.AsyncClient(servers, tenant=a.tenant) as client:
        while not stop.is_set():
            await life(a, client, h, rng, stop)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
