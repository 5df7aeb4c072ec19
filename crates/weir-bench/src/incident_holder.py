"""A permit holder of ``weir bench --incident SCHEDULE --python N``, run by the bench with
``python -c`` (one process per holder) and the Python client (``clients/python``).

Arguments: the nodes' HTTP addresses (comma separated, the entry node first), the tenant,
the limit to hold, the limit to take work permits of, the session TTL in seconds.

It opens a session, acquires one permit of the hold limit and prints ``held``; then, until
its stdin closes, it acquires and releases a permit of the work limit every ``PACE``
seconds (in a new session once the first is lost), printing ``arrived-lost REASON`` for a grant whose ``lost_reason()`` already
answers when it arrives, and watches the held permit: the first time ``lost()`` resolves it
prints ``lost REASON``. When stdin closes it checks the held permit once more, releases
it, closes the session and prints ``done GRANTS ARRIVED_LOST``.
"""

import asyncio
import contextlib
import sys

import weir

#: Seconds between two work acquires.
PACE = 0.1
#: Longest one work acquire, the hold's acquire, a release or the close is waited for (s).
WAIT = 10.0


def say(line: str) -> None:
    print(line, flush=True)


async def main() -> None:
    servers, tenant, hold, work, ttl = sys.argv[1:6]
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    async with weir.AsyncClient(servers.split(","), tenant=tenant) as client:
        session = await asyncio.wait_for(client.session(ttl=float(ttl)), WAIT)
        held = await session.acquire(hold, timeout=WAIT)
        say("held")
        told: list[str] = []

        async def watch() -> None:
            why = await held.lost()
            told.append(str(why))
            say(f"lost {why}")

        watcher = asyncio.ensure_future(watch())
        grants = arrived_lost = 0
        # Once the held permit's session is lost, work goes on in a session of its own.
        worker = session
        while not stdin_closed.done():
            try:
                permit = await worker.acquire(work, timeout=WAIT)
            except weir.WeirError:
                if held.lost_reason() is not None:
                    with contextlib.suppress(weir.WeirError, TimeoutError):
                        worker = await asyncio.wait_for(client.session(ttl=float(ttl)), WAIT)
                await asyncio.sleep(PACE)
                continue
            grants += 1
            why = permit.lost_reason()
            if why is not None:
                arrived_lost += 1
                say(f"arrived-lost {why}")
            with contextlib.suppress(weir.WeirError, TimeoutError):
                await asyncio.wait_for(permit.release(), WAIT)
            await asyncio.sleep(PACE)
        watcher.cancel()
        why = held.lost_reason()
        if why is not None and not told:
            say(f"lost {why}")
        with contextlib.suppress(weir.WeirError, TimeoutError):
            await asyncio.wait_for(held.release(), WAIT)
        with contextlib.suppress(weir.WeirError, TimeoutError):
            await asyncio.wait_for(session.close(), WAIT)
        say(f"done {grants} {arrived_lost}")


asyncio.run(main())
