"""Incidents against a real cluster: a client cut off (G2), a leader killed or stopped
under held permits (G9), a release whose outcome is unknown, a grant whose event was lost.

The client under test reaches the nodes through :class:`harness.Proxy`, which can cut it
off without closing anything (a partition: silence, not refusal)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from harness import Cluster, Proxy, async_wait_until, proxies_for

import weir


@pytest.fixture
def proxies(cluster: Cluster) -> Iterator[list[Proxy]]:
    """One proxy per node, the leader's first."""
    leader = cluster.leader()
    order = [leader] + [n.id for n in cluster.nodes if n.id != leader]
    made = list(proxies_for(cluster, order))
    try:
        yield made
    finally:
        for p in made:
            p.close()


async def in_use(client: weir.AsyncClient, limit: str) -> int:
    return (await client.show_limit(limit)).in_use


async def test_g2_a_cut_off_holder_stops_believing_before_a_waiter_is_granted(
    cluster: Cluster, proxies: list[Proxy]
) -> None:
    ttl = 3.0
    async with (
        weir.AsyncClient([p.addr for p in proxies]) as cut_client,
        weir.AsyncClient(cluster.servers) as other,
    ):
        await other.define_limit("g2", concurrent=1)
        holder = await cut_client.session(ttl=ttl)
        waiter_session = await other.session(ttl=ttl)
        permit = await holder.acquire("g2")
        assert cut_client.current_server.endswith(proxies[0].addr)  # the leader's proxy
        assert await waiter_session.wait_events_connected(10)
        waiter = asyncio.ensure_future(waiter_session.acquire("g2", timeout=60))

        async def queued() -> bool:
            return (await other.show_limit("g2")).waiting == 1

        await async_wait_until(queued, 10, "the waiter queues")

        # Cut from the leader only: the holder moves to a follower, which forwards to the
        # leader; its keep-alives go on being acknowledged and it keeps its permit.
        acknowledged = holder.keepalives_acknowledged
        proxies[0].cut()
        await asyncio.sleep(2 * ttl)
        assert permit.lost_reason() is None, permit.lost_reason()
        assert holder.keepalives_acknowledged >= acknowledged + 5
        assert not cut_client.current_server.endswith(proxies[0].addr)
        assert not waiter.done()
        proxies[0].heal()

        # Cut from every node: the holder's belief ends (deadline), and only after that is
        # the waiter elsewhere granted. Both instants on one clock (CLOCK_BOOTTIME here).
        cut_at = weir.boot_now()
        for p in proxies:
            p.cut()

        async def lost_at() -> tuple[weir.Lost, float]:
            why = await permit.lost()
            return why, weir.boot_now()

        losing = asyncio.ensure_future(lost_at())
        granted = await asyncio.wait_for(waiter, 30)
        granted_at = weir.boot_now()
        why, lost_seen_at = await asyncio.wait_for(losing, 1)
        belief_ended_at = holder.deadline

        assert why.kind is weir.LostKind.DEADLINE
        assert belief_ended_at < granted_at, (belief_ended_at, granted_at)
        assert lost_seen_at < granted_at, (lost_seen_at, granted_at)
        # The belief ended within TTL - margin of the cut (the last acknowledged
        # keep-alive was sent before it), lost() saw it within its look interval.
        assert belief_ended_at - cut_at <= ttl - weir.margin_for(ttl) + 0.01
        assert lost_seen_at - belief_ended_at < 0.5
        assert granted.fence > permit.fence
        print(f"\nG2: belief ended {belief_ended_at - cut_at:.3f} s after the cut, "
              f"the waiter was granted {granted_at - belief_ended_at:.3f} s after that")

        # Back in touch: the cluster expired the cut-off session, and the client learns it.
        for p in proxies:
            p.heal(reset=True)

        async def expired() -> bool:
            return holder.ended is not None

        await async_wait_until(expired, 15, "the cut-off session learns it expired")
        assert holder.ended == weir.Lost(weir.LostKind.EXPIRED)
        await granted.release()
        await waiter_session.close()


async def test_a_release_whose_outcome_is_unknown_is_retried_until_known(
    cluster: Cluster, proxies: list[Proxy]
) -> None:
    async with (
        weir.AsyncClient([p.addr for p in proxies], request_deadline=2.0) as client,
        weir.AsyncClient(cluster.servers) as observer,
    ):
        await observer.define_limit("unknown-release", concurrent=1)
        session = await client.session(ttl=20)
        permit = await session.acquire("unknown-release")
        for p in proxies:
            p.cut()
        with pytest.raises((weir.OutcomeUnknown, weir.Unavailable)):
            await permit.release()
        assert permit.lost_reason() is None or permit.released
        assert await in_use(observer, "unknown-release") == 1
        # Whatever the cut-off connections held is dropped: only a retry can release it.
        for p in proxies:
            p.heal(reset=True)

        async def freed() -> bool:
            return await in_use(observer, "unknown-release") == 0

        await async_wait_until(freed, 10, "the background release frees the permit")
        assert session.ended is None  # freed by the release, not by the session's end
        await session.close()


async def test_a_grant_whose_event_was_lost_is_learned_by_asking_again(
    cluster: Cluster, proxies: list[Proxy]
) -> None:
    async with (
        weir.AsyncClient([p.addr for p in proxies]) as client,
        weir.AsyncClient(cluster.servers) as other,
    ):
        await other.define_limit("reask", concurrent=1)
        holder = await other.session(ttl=10)
        held = await holder.acquire("reask")
        session = await client.session(ttl=10)
        assert await session.wait_events_connected(10)
        waiter = asyncio.ensure_future(session.acquire("reask", timeout=60))

        async def queued() -> bool:
            return (await other.show_limit("reask")).waiting == 1

        await async_wait_until(queued, 10, "the acquire queues")
        for p in proxies:
            p.cut()
        await held.release()  # the cluster grants the waiter now; its event cannot arrive
        status = await other.show_limit("reask")
        assert (status.in_use, status.waiting) == (1, 0)
        await asyncio.sleep(1.5)
        assert not waiter.done()
        for p in proxies:
            p.heal(reset=True)
        permit = await asyncio.wait_for(waiter, 15)
        assert await other.fence_held("reask", permit.fence)
        assert (await other.show_limit("reask")).in_use == 1
        await permit.release()
        assert (await other.show_limit("reask")).in_use == 0
        await session.close()
        await holder.close()


async def test_a_keepalive_to_a_silent_node_is_hedged_to_the_others(
    cluster: Cluster, proxies: list[Proxy]
) -> None:
    # With a TTL of 1.5 s every keep-alive is sent with less than 1.6 s of belief left, so
    # one unanswered for 400 ms by a silent node is hedged to the other nodes, well before
    # the 1 s silence bound gives its node up; the node that answers becomes the current
    # one. (Without the hedge the silence bound alone moves it about 0.6 s later, which
    # at this TTL leaves next to nothing of the belief.)
    async with (
        weir.AsyncClient([p.addr for p in proxies]) as client,
        weir.AsyncClient(cluster.servers) as observer,
    ):
        await observer.define_limit("hedge", concurrent=1)
        session = await client.session(ttl=1.5)
        permit = await session.acquire("hedge")
        assert await session.wait_events_connected(10)
        assert client.current_server.endswith(proxies[0].addr)
        proxies[0].cut()

        async def hedged() -> bool:
            return session.keepalives_hedged >= 1

        await async_wait_until(hedged, 5, "a keep-alive is hedged", every=0.02)
        await asyncio.sleep(2 * 1.5)
        assert not client.current_server.endswith(proxies[0].addr)
        assert permit.lost_reason() is None, permit.lost_reason()
        assert await observer.fence_held("hedge", permit.fence)
        proxies[0].heal()
        await permit.release()
        await session.close()


async def _watch(permits: list[weir.AsyncPermit], lost: list[str], seconds: float) -> None:
    """Notes every permit that may be lost, for ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for p in permits:
            why = p.lost_reason()
            if why is not None:
                lost.append(f"fence {p.fence}: {why}")
        await asyncio.sleep(0.05)


async def _hold_through(cluster: Cluster, incident: str) -> None:
    """Sessions (TTL 3 s) hold permits through two clients, one entering by the leader and
    one by a follower, while the leader is killed or stopped, or stopped and then, once
    resumed, its successor killed; none may be lost."""
    leader = cluster.leader()
    others = [n.id for n in cluster.nodes if n.id != leader]
    by_leader = [cluster.node(i).http for i in [leader, *others]]
    by_follower = [cluster.node(i).http for i in [*others, leader]]
    async with (
        weir.AsyncClient(by_leader) as via_leader,
        weir.AsyncClient(by_follower) as via_follower,
    ):
        await via_leader.define_limit("incident", concurrent=10)
        sessions = [await c.session(ttl=3) for c in (via_leader, via_follower) for _ in range(2)]
        permits = [await s.acquire("incident") for s in sessions]
        assert all(s.wait_events_connected for s in sessions)

        struck = time.monotonic()
        if incident == "kill":
            cluster.kill(leader)
        else:
            cluster.pause(leader)
        lost: list[str] = []
        resumed_after: float | None = None
        try:
            if incident == "stall-then-kill":
                # The stalled leader resumes after 5 s, and 3 s later the node that took
                # over is killed: a frozen VM back, then its successor restarted.
                second = await asyncio.to_thread(cluster.leader, 5.0)
                await _watch(permits, lost, 5.0 - (time.monotonic() - struck))
                cluster.resume(leader)
                await _watch(permits, lost, 3.0)
                cluster.kill(second)
                struck = time.monotonic()
            deadline = time.monotonic() + 6.0  # two TTLs
            probe_session = await asyncio.wait_for(via_follower.session(ttl=3), 15)
            probe = asyncio.ensure_future(probe_session.acquire("incident"))
            while time.monotonic() < deadline:
                for p in permits:
                    why = p.lost_reason()
                    if why is not None:
                        lost.append(f"fence {p.fence}: {why}")
                if resumed_after is None and probe.done():
                    resumed_after = time.monotonic() - struck
                await asyncio.sleep(0.05)
        finally:
            if incident in ("pause", "stall-then-kill"):
                cluster.resume(leader)
        assert not lost, lost
        new_permit = await asyncio.wait_for(probe, 15)
        if resumed_after is None:
            resumed_after = time.monotonic() - struck
        print(f"\n{incident}: a new grant {resumed_after:.2f} s after the leader's {incident}")
        for p in permits:
            assert p.lost_reason() is None
            assert await via_follower.fence_held("incident", p.fence)
        assert (await via_follower.show_limit("incident")).in_use == len(permits) + 1
        for p in [*permits, new_permit]:
            await p.release()
        assert (await via_follower.show_limit("incident")).in_use == 0
        assert all(s.ended is None for s in sessions)
        hedged = sum(s.keepalives_hedged for s in sessions)
        print(f"{incident}: {hedged} keep-alives hedged")


async def test_a_killed_leader_costs_no_permit(fresh_cluster: Cluster) -> None:
    await _hold_through(fresh_cluster, "kill")


async def test_a_stopped_leader_costs_no_permit(fresh_cluster: Cluster) -> None:
    await _hold_through(fresh_cluster, "pause")


async def test_a_stall_then_a_kill_of_the_next_leader_costs_no_permit(
    fresh_cluster: Cluster,
) -> None:
    await _hold_through(fresh_cluster, "stall-then-kill")
