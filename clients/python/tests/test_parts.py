"""Keyed limits, requests of several parts and held costs against a real cluster: a
bucket or semaphore per key, all parts granted under one fence or none charged, refusals
naming their part, and estimates settled at the actual cost."""

from __future__ import annotations

import asyncio

import pytest
from harness import Cluster, async_wait_until

import weir


async def test_a_keyed_rate_limit_has_a_bucket_per_key(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="keys") as client:
        await client.define_limit("per-user", per_second=0.01, burst=2, keys_max=2)
        # A key's tokens are its own: no bucket of one limit is told.
        assert await client.take("per-user", key="alice") is None
        assert await client.take("per-user", key="alice") is None
        with pytest.raises(weir.Busy):
            await client.take("per-user", key="alice")
        assert await client.take("per-user", key="bob", units=2) is None
        # Two keys live, the bound: a third is refused, not forgotten.
        with pytest.raises(weir.AtCapacity) as full:
            await client.take("per-user", key="carol")
        assert full.value.limit == 2
        with pytest.raises(weir.Invalid) as keyless:
            await client.take("per-user")
        assert "keyed" in keyless.value.message


async def test_a_keyed_concurrency_limit_has_a_semaphore_per_key(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="keys") as client:
        await client.define_limit("per-tool", concurrent=1, keyed=True)
        async with client.session() as s:
            async with s.acquire("per-tool", key="search") as a, \
                    s.acquire("per-tool", key="browse") as b:
                assert (a.key, b.key) == ("search", "browse") and a.fence != b.fence
                with pytest.raises(weir.Busy):
                    await s.acquire("per-tool", key="search", wait=False)
            # Released on exit: the key has room again.
            async with s.acquire("per-tool", key="search", wait=False) as again:
                assert again.fence > a.fence


async def test_parts_are_granted_together_or_none_is_charged(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="parts") as client:
        await client.define_limit("db", concurrent=2)
        await client.define_limit("gpu", concurrent=1)
        async with client.session() as s:
            both = await s.acquire("db", parts=[weir.Part("gpu")])
            assert both.parts == (weir.Part("db"), weir.Part("gpu"))
            assert (await client.show_limit("db")).in_use == 1
            assert (await client.show_limit("gpu")).in_use == 1
            # db has room, gpu has none: refused, and db is not charged.
            with pytest.raises(weir.Busy):
                await s.acquire("db", parts=[weir.Part("gpu")], wait=False)
            assert (await client.show_limit("db")).in_use == 1
            await both.release()
            assert (await client.show_limit("db")).in_use == 0
            assert (await client.show_limit("gpu")).in_use == 0
            # The refusal names the part that refused.
            with pytest.raises(weir.TooLarge) as large:
                await s.acquire("db", parts=[weir.Part("gpu", units=5)])
            assert large.value.part == weir.Part("gpu", 5)
            assert (large.value.limit, large.value.units, large.value.max) == ("gpu", 5, 1)
            with pytest.raises(weir.UnknownLimit) as unknown:
                await s.acquire("db", parts=[weir.Part("no-such-part")])
            assert unknown.value.part == weir.Part("no-such-part")
            assert (await client.show_limit("db")).in_use == 0


async def test_a_queued_request_of_several_parts_is_granted_on_the_event_stream(
    cluster: Cluster,
) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="parts") as client:
        await client.define_limit("pool", concurrent=4)
        await client.define_limit("lock", concurrent=1)
        async with client.session() as holder, client.session() as waiter:
            blocker = await holder.acquire("lock")
            queued = asyncio.ensure_future(
                waiter.acquire("pool", units=2, parts=[weir.Part("lock")], timeout=30)
            )

            async def waits() -> bool:
                return (await client.show_limit("lock")).waiting == 1

            await async_wait_until(waits, 10, "the request of two parts queues")
            # Nothing of it is charged while it waits.
            assert (await client.show_limit("pool")).in_use == 0
            await blocker.release()
            both = await asyncio.wait_for(queued, 10)
            assert both.fence > blocker.fence and both.units == 2
            assert (await client.show_limit("pool")).in_use == 2
            assert await client.fence_held("lock", both.fence)
            await both.release()
            assert (await client.show_limit("pool")).in_use == 0


async def test_a_take_of_several_parts_takes_from_all_or_none(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="parts") as client:
        await client.define_limit("org", per_second=0.01, burst=10)
        await client.define_limit("project", per_second=0.01, burst=3)
        assert await client.take("org", units=2, parts=[weir.Part("project", 2)]) is None
        with pytest.raises(weir.Busy) as busy:
            await client.take("org", units=2, parts=[weir.Part("project", 2)])
        assert busy.value.part is None  # Busy names no limit
        # The refused take charged neither: org still has 8 of its 10.
        assert (await client.show_limit("org")).tokens == 8
        assert (await client.show_limit("project")).tokens == 1


async def test_a_held_estimate_settles_at_the_actual_cost(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="held") as client:
        await client.define_limit("model-tokens", per_second=0.01, burst=1_000)
        async with client.session() as s:
            async with s.acquire("model-tokens", units=300, estimate=True) as call:
                assert call.estimate and call.units == 300
                assert (await client.show_limit("model-tokens")).tokens == 700
                under = await call.settle(100)
                assert (under.duplicate, under.returned_tokens, under.overrun_tokens) == (
                    False, 200, 0)
                assert (await client.show_limit("model-tokens")).tokens == 900
                again = await call.settle(100)  # a retry changes nothing
                assert (again.duplicate, again.returned_tokens) == (True, 0)
                assert (await client.show_limit("model-tokens")).tokens == 900
            async with s.acquire("model-tokens", units=300, estimate=True) as call:
                over = await call.settle(500)
                assert (over.duplicate, over.returned_tokens, over.overrun_tokens) == (
                    False, 0, 200)
            assert (await client.show_limit("model-tokens")).tokens == 400
            # Released unsettled, the estimate stands as charged.
            async with s.acquire("model-tokens", units=100, estimate=True):
                pass
            assert (await client.show_limit("model-tokens")).tokens == 300
            async with s.acquire("model-tokens", units=10) as plain:
                with pytest.raises(ValueError, match="estimate=True"):
                    await plain.settle(5)


async def test_an_estimate_beside_a_concurrent_part_settles_and_stays_held(
    cluster: Cluster,
) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="held") as client:
        await client.define_limit("gpu", concurrent=1)
        await client.define_limit("llm", per_second=0.01, burst=1_000)
        async with client.session() as s:
            async with s.acquire("gpu", parts=[weir.Part("llm", 800)], estimate=True) as job:
                assert (await client.show_limit("llm")).tokens == 200
                settled = await job.settle(350)
                assert (settled.duplicate, settled.overrun_tokens) == (False, 0)
                # Each part's estimate and return: the rate part's, none for the cap.
                assert settled.parts == (
                    weir.PartSettlement(weir.Part("gpu"), None, None),
                    weir.PartSettlement(weir.Part("llm", 800), 800, 450),
                )
                assert (settled.estimate, settled.returned_tokens) == (800, 450)
                assert (await client.show_limit("llm")).tokens == 650
                # The concurrent part is still held until the release.
                assert await client.fence_held("gpu", job.fence)
                assert (await client.show_limit("gpu")).in_use == 1
            assert (await client.show_limit("gpu")).in_use == 0
            assert (await client.show_limit("llm")).tokens == 650


def test_the_blocking_client_settles_too(cluster: Cluster) -> None:
    with weir.Client(cluster.servers, tenant="held-sync") as client:
        client.define_limit("model-tokens", per_second=0.01, burst=100)
        with client.session() as s, s.acquire("model-tokens", units=40, estimate=True) as p:
            assert p.settle(25).returned_tokens == 15
        assert client.show_limit("model-tokens").tokens == 75


async def test_two_rate_parts_settle_each_their_own_estimate(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="held-two") as client:
        await client.define_limit("per-user", per_second=0.01, burst=1_000, keyed=True)
        await client.define_limit("global", per_second=0.01, burst=1_000)
        async with client.session() as s:
            parts = [weir.Part("global", 300)]
            async with s.acquire("per-user", 500, key="alice", parts=parts,
                                 estimate=True) as call:
                settled = await call.settle(400)
                assert settled.parts == (
                    weir.PartSettlement(weir.Part("per-user", 500, "alice"), 500, 100),
                    weir.PartSettlement(weir.Part("global", 300), 300, 0),
                )
                assert (settled.estimate, settled.returned_tokens) == (800, 100)
                assert settled.overrun_tokens == 100  # global: 400 against 300
                again = await call.settle(400)
                assert again.duplicate and again.returned_tokens == 0


async def test_key_status_and_keys_read_a_keyed_limit(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="key-reads") as client:
        await client.define_limit("per-user", per_second=0.01, burst=5, keyed=True)
        for user, units in [("carol", 1), ("alice", 2), ("bob", 3)]:
            assert await client.take("per-user", units, key=user) is None
        alice = await client.key_status("per-user", "alice")
        assert (alice.name, alice.tokens, alice.burst) == ("per-user", 3, 5)
        fresh = await client.key_status("per-user", "nobody")  # not live: a full bucket
        assert fresh.tokens == 5
        first = await client.keys("per-user", limit=2)
        assert first == weir.KeyPage(["alice", "bob"], "bob")
        rest = await client.keys("per-user", after=first.next, limit=2)
        assert rest == weir.KeyPage(["carol"], None)
        with pytest.raises(weir.UnknownLimit):
            await client.keys("no-such")
        await client.define_limit("plain", concurrent=1)
        with pytest.raises(weir.UnknownLimit):
            await client.key_status("plain", "alice")


def test_the_blocking_client_reads_keys(cluster: Cluster) -> None:
    with weir.Client(cluster.servers, tenant="key-reads-sync") as client:
        client.define_limit("per-ip", concurrent=2, keyed=True)
        with client.session() as s, s.acquire("per-ip", key="10.0.0.1"):
            assert client.key_status("per-ip", "10.0.0.1").in_use == 1
            assert client.keys("per-ip").keys == ["10.0.0.1"]
        assert client.keys("per-ip") == weir.KeyPage([], None)


async def test_a_timed_out_request_names_the_part_that_lacked_room(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="room") as client:
        await client.define_limit("pool", concurrent=4)
        await client.define_limit("lock", concurrent=1)
        async with client.session() as holder, client.session() as waiter, \
                holder.acquire("lock"):
            with pytest.raises(weir.TimedOut) as timed_out:
                await waiter.acquire("pool", parts=[weir.Part("lock")], timeout=0.3)
            assert timed_out.value.part == weir.Part("lock")
            assert str(timed_out.value) == (
                "room/pool: still waiting after 0.3 s; lock lacks room: 1 of 1 in use,"
                " needs 1")


async def test_a_busy_answer_says_its_retry_in_seconds(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="room") as client:
        await client.define_limit("slow", per_second=0.1, burst=1)
        await client.take("slow")
        with pytest.raises(weir.Busy) as busy:
            await client.take("slow")
        after = busy.value.retry_after
        assert after is not None and 0 < after <= 10
        assert str(busy.value) == f"busy: retry in {after:.1f} s"
        assert "retry at" not in str(busy.value)
