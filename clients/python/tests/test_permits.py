"""The permit cycle against a real cluster: acquire, fence, queue, grant on the event
stream, release; timeouts and cancellations withdraw their tickets."""

from __future__ import annotations

import asyncio

import pytest
from harness import Cluster, async_wait_until

import weir


async def waiting(client: weir.AsyncClient, limit: str) -> int:
    return (await client.show_limit(limit)).waiting


async def test_permit_cycle(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("cycle", concurrent=1)
        async with client.session(ttl=3) as s1, client.session(ttl=3) as s2:
            assert s1.id != s2.id
            async with s1.acquire("cycle") as p1:
                assert p1.fence > 0 and p1.units == 1
                assert p1.lost_reason() is None
                assert await client.fence_held("cycle", p1.fence)
                assert (await client.show_limit("cycle")).in_use == 1
                waiter = asyncio.ensure_future(s2.acquire("cycle", timeout=30))

                async def queued() -> bool:
                    return await waiting(client, "cycle") == 1

                await async_wait_until(queued, 10, "the second acquire queues")
                assert not waiter.done()
                assert s2.queued_position() == 0
            # p1 was released on leaving the block: the waiter is granted, told by the
            # session's event stream.
            assert p1.released
            p2 = await asyncio.wait_for(waiter, 10)
            assert p2.fence > p1.fence
            assert not await client.fence_held("cycle", p1.fence)
            assert await client.fence_held("cycle", p2.fence)
            status = await client.show_limit("cycle")
            assert (status.in_use, status.waiting, status.max_in_use) == (1, 0, 1)
            await p2.release()
            await p2.release()  # a second release does nothing
            assert (await client.show_limit("cycle")).in_use == 0
        # Closed sessions: acquiring again says the session is lost.
        with pytest.raises(weir.SessionLost):
            await s1.acquire("cycle")


async def test_units_priority_and_listing(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("units", concurrent=3)
        limits = {status.name: status for status in await client.list_limits()}
        assert limits["units"].concurrent == 3
        for name in ("listed-b", "listed-a"):
            await client.define_limit(name, concurrent=1)
        listed = [status.name for status in await client.list_limits(prefix="listed-")]
        assert listed == ["listed-a", "listed-b"]
        async with client.session() as s:
            async with s.acquire("units", units=2, priority=weir.Priority(5, "k", 2)) as p:
                assert p.units == 2
                assert (await client.show_limit("units")).in_use == 2
                with pytest.raises(weir.Busy) as busy:
                    await s.acquire("units", units=2, wait=False)
                assert busy.value.retry_after is None  # only a release makes room
            assert (await client.show_limit("units")).in_use == 0


async def test_timeout_and_cancel_withdraw_the_ticket(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("withdraw", concurrent=1)
        async with client.session() as holder, client.session() as other:
            async with holder.acquire("withdraw"):
                with pytest.raises(weir.TimedOut):
                    await other.acquire("withdraw", timeout=0.5)

                async def none_waiting() -> bool:
                    return await waiting(client, "withdraw") == 0

                await async_wait_until(none_waiting, 10, "the timed-out ticket is withdrawn")

                task = asyncio.ensure_future(other.acquire("withdraw"))

                async def one_waiting() -> bool:
                    return await waiting(client, "withdraw") == 1

                await async_wait_until(one_waiting, 10, "the acquire queues")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await async_wait_until(none_waiting, 10, "the cancelled ticket is withdrawn")
            status = await client.show_limit("withdraw")
            assert (status.in_use, status.waiting) == (0, 0)


async def test_removing_a_limit_refuses_its_waiters_with_fields(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("doomed", concurrent=1)
        async with client.session() as holder, client.session() as other:
            permit = await holder.acquire("doomed")
            waiter = asyncio.ensure_future(other.acquire("doomed", timeout=30))

            async def queued() -> bool:
                return await waiting(client, "doomed") == 1

            await async_wait_until(queued, 10, "the waiter queues")
            await client.remove_limit("doomed")
            with pytest.raises(weir.LimitRemoved) as removed:
                await asyncio.wait_for(waiter, 10)
            assert removed.value.limit == "doomed"
            assert removed.value.tenant == "default"
            await permit.release()


async def test_a_ticket_asked_again_is_one_holding_of_two_permits(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="reask") as client:
        await client.define_limit("db", concurrent=2)
        async with client.session(ttl=3) as s:
            # The same grant: same fence, nothing charged twice.
            first = await s.acquire("db", ticket=7001)
            again = await s.acquire("db", ticket=7001, wait=False)
            assert (first.ticket, again.ticket, again.fence) == (7001, 7001, first.fence)
            assert (await client.show_limit("db")).in_use == 1
            assert first.lost_reason() is None and again.lost_reason() is None
            # A re-ask that fails leaves the ticket with the permit that holds it.
            with pytest.raises(weir.TimedOut):
                await s.acquire("db", ticket=7001, timeout=0)
            assert first.lost_reason() is None and again.lost_reason() is None
            # Releasing the second releases the ticket and tells the first.
            await again.release()
            why = await asyncio.wait_for(first.lost(), 5)
            assert why == weir.Lost(weir.LostKind.RELEASED)
            assert str(why) == "released through another permit of its ticket"
            assert (await client.show_limit("db")).in_use == 0
            await first.release()
            # Asked again once released: refused, nothing held.
            with pytest.raises(weir.TicketReleased) as refused:
                await s.acquire("db", ticket=7001)
            assert (refused.value.session, refused.value.ticket) == (s.id, 7001)
            assert (await client.show_limit("db")).in_use == 0
            # The session's own tickets go on after the caller's.
            async with s.acquire("db") as next_one:
                assert next_one.ticket == 7002
            # A halt tells both permits of a ticket.
            halted = await s.acquire("db", agent="bot", ticket=20)
            halted_again = await s.acquire("db", agent="bot", ticket=20)
            await client.set_halt("enough", agent="bot")
            try:
                for permit in (halted, halted_again):
                    why = await asyncio.wait_for(permit.lost(), 5)
                    assert (why.kind, why.scope) == (weir.LostKind.HALTED, weir.HaltScope("bot"))
            finally:
                await client.clear_halt(agent="bot")
            await halted.release()
            assert (await client.show_limit("db")).in_use == 0
            # The session's end tells both.
            ended = await s.acquire("db", ticket=30)
            ended_again = await s.acquire("db", ticket=30)
        for permit in (ended, ended_again):
            assert permit.lost_reason() == weir.Lost(weir.LostKind.CLOSED)
        assert (await client.show_limit("db")).in_use == 0
