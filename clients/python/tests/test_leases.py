"""Token leases against a real cluster: takes decided locally within what the lease was
given plus its refill, renewals, tokens given back at the end, and nothing spent once the
session has ended, its belief deadline has passed, or a halt refused a renewal."""

from __future__ import annotations

import asyncio

import pytest
from harness import Cluster, async_wait_until

import weir


async def freeze_keepalives(session: weir.AsyncSession) -> None:
    """From now on the session's keep-alives go unanswered (sent nowhere), so its belief
    deadline stops moving; everything else it sends still reaches the cluster."""

    async def never() -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    session._hedged_keep_alive = never  # type: ignore[method-assign]


async def test_local_takes_stay_within_the_share_and_the_lease_is_renewed(
    cluster: Cluster,
) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("lease-local", per_second=20, burst=40)
        async with client.session(ttl=2) as s:
            opened = weir.boot_now()
            async with s.lease("lease-local", rate_per_s=10, cap=20) as lease:
                first = lease.figures
                # Within 3/4 of the limit's rate and burst: all of what it asked, and the
                # cap's tokens moved out of the cluster's full bucket.
                assert (first.requests, first.rate_micro_per_s, first.cap) == (
                    1, 10_000_000, 20)
                assert first.level_micro == 20_000_000
                assert (await client.show_limit("lease-local")).tokens == 20
                taken = 0
                while weir.boot_now() - opened < 1.5:
                    if lease.try_take():
                        taken += 1
                    else:
                        await asyncio.sleep(0.01)
                elapsed = weir.boot_now() - opened
                # The whole cap at once, then the refill: never above cap + rate x elapsed,
                # and the refill was spent too (well above the cap alone).
                assert 25 <= taken <= 20 + 10 * elapsed, (taken, elapsed)
                figures = lease.figures
                assert figures.local == taken
                assert figures.short > 0
                # Renewed every TTL/5 = 0.4 s, and early after short takes.
                assert figures.requests >= 4, figures
                assert figures.cluster == 0
                # The opt-in on the existing take: decided by the lease when it covers it.
                await asyncio.sleep(0.3)
                assert await client.take("lease-local", lease=lease) is None
                assert lease.figures.local == taken + 1
                with pytest.raises(ValueError, match="not a lease of"):
                    await client.take("lease-other", lease=lease)
                with pytest.raises(ValueError, match="no parts and no agent"):
                    await client.take("lease-local", lease=lease, agent="a")


async def test_the_end_gives_the_tokens_back(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        # A refill too slow to count: the cluster's bucket moves only by the lease.
        await client.define_limit("lease-back", per_second=0.01, burst=40)
        async with client.session(ttl=3) as s:
            lease = await s.lease("lease-back", rate_per_s=0.005, cap=20)
            assert (await client.show_limit("lease-back")).tokens == 20
            assert all(lease.try_take() for _ in range(5))
            await lease.end()
            assert lease.ended == "ended"
            assert not lease.try_take()
            # The 15 tokens left in the local bucket are back in the cluster's.
            assert (await client.show_limit("lease-back")).tokens == 35
            assert s.leases() == []
            requests = lease.figures.requests
            await lease.end()  # a second end sends nothing
            assert lease.figures.requests == requests


async def test_leases_of_a_session_ended_at_once_all_give_their_tokens_back(
    cluster: Cluster,
) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        names = [f"lease-many-{i}" for i in range(4)]
        for name in names:
            await client.define_limit(name, per_second=0.01, burst=40)
        async with client.session(ttl=3) as s:
            leases = await asyncio.gather(
                *(s.lease(name, rate_per_s=0.005, cap=20) for name in names))
            assert [(await client.show_limit(n)).tokens for n in names] == [20] * 4
            # Requests of one session apply in the order of their seq: none of these is
            # overtaken by a later one and answered as a duplicate that ends nothing.
            await asyncio.gather(*(lease.end() for lease in leases))
            assert [(await client.show_limit(n)).tokens for n in names] == [40] * 4


async def test_nothing_is_spent_after_the_session_closes(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("lease-closed", per_second=10, burst=40)
        s = await client.session(ttl=3)
        lease = await s.lease("lease-closed", rate_per_s=5, cap=20)
        assert lease.try_take(2)
        await s.close()
        assert lease.ended is not None and "closed" in lease.ended
        assert not lease.try_take()
        assert lease.figures.local == 1
        # A take on it goes to the cluster, which has its own tokens.
        assert await lease.take() is not None
        assert lease.figures.cluster == 1


async def test_nothing_is_spent_past_the_belief_deadline(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("lease-deadline", per_second=40, burst=40)
        async with client.session(ttl=2) as s:
            lease = await s.lease("lease-deadline", rate_per_s=20, cap=10)
            await freeze_keepalives(s)
            deadline = s.deadline
            # One take every 50 ms, half the lease's rate: the bucket never runs dry, and
            # renewals keep being answered until the cluster expires the session.
            late: list[float] = []
            before = 0
            stop = deadline + 1.5
            while weir.boot_now() < stop:
                now = weir.boot_now()
                if lease.try_take():
                    if now >= deadline:
                        late.append(now - deadline)
                    else:
                        before += 1
                await asyncio.sleep(0.05)
            assert s.deadline == deadline  # no keep-alive was acknowledged
            assert before > 10
            assert late == [], f"taken locally {late} s past the belief deadline"


            async def expired() -> bool:
                return s.ended is not None

            await async_wait_until(expired, 10, "the cluster expires the session")
            assert lease.ended is not None
            assert not lease.try_take()


async def test_a_halt_refusing_a_renewal_stops_the_lease(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="lease-halt") as client:
        await client.define_limit("api", per_second=10, burst=20)
        async with client.session(ttl=2) as s:
            lease = await s.lease("api", rate_per_s=5, cap=10)
            assert lease.try_take()
            await client.set_halt("stop spending")
            try:

                async def stopped() -> bool:
                    return lease.ended is not None

                # The next renewal (within TTL/5) is refused.
                await async_wait_until(stopped, 5, "a renewal is refused by the halt")
                assert lease.ended is not None and "halted" in lease.ended.lower()
                assert not lease.try_take()
                with pytest.raises(weir.Halted):
                    await lease.take()
                with pytest.raises(weir.Halted):
                    await s.lease("api", rate_per_s=5, cap=10)
            finally:
                await client.clear_halt()


def test_the_blocking_lease(cluster: Cluster) -> None:
    with weir.Client(cluster.servers) as client:
        client.define_limit("lease-sync", per_second=0.01, burst=20)
        with client.session(ttl=3) as s, s.lease("lease-sync", rate_per_s=1, cap=10) as lease:
            assert [lease.try_take() for _ in range(3)] == [True] * 3
            assert client.take("lease-sync", 2, lease=lease) is None
            assert lease.take() is None
            assert lease.figures.local == 5
            with pytest.raises(weir.UnknownLimit):
                s.lease("lease-nope", rate_per_s=1, cap=1)
        # Ended on leaving the block: 4 tokens back of the 10 it held (6 units in 5 takes).
        assert lease.ended is not None
        assert client.show_limit("lease-sync").tokens == 14


async def test_two_holders_and_the_cluster_together_spend_within_burst_plus_rate(
    cluster: Cluster,
) -> None:
    """A smoke of G1 in spend time: two sessions leasing one limit and takes the cluster
    decides, all draining it as fast as they can, spend at most burst + rate x elapsed."""
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("lease-g1", per_second=20, burst=20)
        async with client.session(ttl=2) as a, client.session(ttl=2) as b:
            started = weir.boot_now()
            first = await a.lease("lease-g1", rate_per_s=10, cap=10)
            second = await b.lease("lease-g1", rate_per_s=10, cap=10)
            # The second gets what is left of three quarters of the rate and the burst.
            assert (second.figures.rate_micro_per_s, second.figures.cap) == (5_000_000, 5)
            until = started + 2.0
            spent = {"cluster": 0}

            async def drain(lease: weir.AsyncLease) -> None:
                while weir.boot_now() < until:
                    if not lease.try_take():
                        await asyncio.sleep(0.005)

            async def cluster_takes() -> None:
                while weir.boot_now() < until:
                    try:
                        await client.take("lease-g1")
                        spent["cluster"] += 1
                    except weir.Busy:
                        await asyncio.sleep(0.02)

            await asyncio.gather(drain(first), drain(second), cluster_takes())
            elapsed = weir.boot_now() - started
            total = first.figures.local + second.figures.local + spent["cluster"]
            # One token of slack for the cluster's log clock against this one.
            assert total <= 20 + 20 * elapsed + 1, (total, elapsed, spent)
            assert first.figures.local > 10 and second.figures.local > 5
            assert spent["cluster"] > 0
            # Renewals moved both to the fair share (half of three quarters of the rate):
            # the first gave up some, and the second's grew.
            assert first.figures.rate_micro_per_s <= 7_500_000
            assert second.figures.rate_micro_per_s > 5_000_000
