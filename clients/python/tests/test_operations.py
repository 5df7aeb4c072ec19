"""Every operation of the API against a real cluster, and each refusal as its typed
exception with its fields."""

from __future__ import annotations

import asyncio
import time

import pytest
from harness import Cluster, async_wait_until

import weir


async def test_unknown_limit_and_too_large(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client, client.session() as s:
        with pytest.raises(weir.UnknownLimit) as unknown:
            await s.acquire("no-such-limit")
        assert unknown.value.limit == "no-such-limit"
        assert unknown.value.tenant == "default"
        assert unknown.value.status == 404
        assert isinstance(unknown.value, weir.Refused)
        with pytest.raises(weir.UnknownLimit):
            await client.show_limit("no-such-limit")

        await client.define_limit("small", concurrent=2)
        with pytest.raises(weir.TooLarge) as large:
            await s.acquire("small", units=5)
        assert (large.value.limit, large.value.units, large.value.max) == ("small", 5, 2)


async def test_takes_answer_remaining_tokens_or_busy_with_retry_after(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        await client.define_limit("api", per_second=2, burst=2)
        assert await client.take("api") == 1
        assert await client.take("api") == 0
        with pytest.raises(weir.Busy) as busy:
            await client.take("api")
        after = busy.value.retry_after
        assert after is not None and 0 < after <= 1.0
        assert busy.value.status == 429
        # Waiting is sleeping for retry_after and taking again.
        started = time.monotonic()
        assert await client.take("api", wait=5.0) is not None
        assert time.monotonic() - started < 5.0
        # A take is for rate-only limits.
        await client.define_limit("capped", concurrent=1)
        with pytest.raises(weir.Invalid):
            await client.take("capped")


async def test_runs_budgets_settlements_and_spend(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="acme") as client:
        tenant = await client.set_tenant(max_running=2, budget_tokens=100)
        assert (tenant.tenant, tenant.max_running, tenant.budget_tokens) == ("acme", 2, 100)
        assert tenant.budget_minor is None

        await client.reserve("r1", agent="planner", period="2026-12", hold_tokens=60)
        await client.reserve("r1", agent="planner", period="2026-12", hold_tokens=60)  # idem
        with pytest.raises(weir.BudgetExhausted) as over:
            await client.reserve("r2", period="2026-12", hold_tokens=50)
        e = over.value
        assert (e.tenant, e.period, e.spent, e.held, e.hold, e.budget) == (
            "acme", "2026-12", 0, 60, 50, 100)
        assert e.kind == "Tokens"

        runs = await client.list_runs()
        assert [(r.run, r.agent) for r in runs] == [("r1", "planner")]

        settled = await client.settle("r1", epoch=1, period="2026-12", tokens=70)
        assert settled.overrun and settled.overrun_tokens == 10
        again = await client.settle("r1", epoch=1, period="2026-12", tokens=70)
        assert again.duplicate
        with pytest.raises(weir.Conflict) as conflict:
            await client.settle("r1", epoch=1, period="2026-12", tokens=71)
        assert (conflict.value.run, conflict.value.epoch) == ("r1", 1)
        spent = await client.spent("2026-12")
        assert (spent.tenant, spent.period, spent.tokens, spent.minor_units) == (
            "acme", "2026-12", 70, 0)

        await client.reserve("r2")
        with pytest.raises(weir.TooManyRuns) as many:
            await client.reserve("r3")
        assert many.value.running == 2
        await client.release_run("r2")
        await client.release_run("r2")  # idempotent
        await client.settle("r1", epoch=2, period="2026-12", tokens=1, release_slot=True)
        assert await client.list_runs() == []
        cleared = await client.set_tenant(max_running=None)
        assert cleared.max_running is None and cleared.budget_tokens == 100


async def test_halts_refuse_and_are_listed(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="halting") as client:
        await client.define_limit("work", concurrent=5)
        await client.set_halt("maintenance")
        await client.set_halt("runaway", agent="bot")
        halts = await client.list_halts()
        assert [(h.scope, h.reason) for h in halts] == [
            (weir.TENANT, "maintenance"),
            (weir.HaltScope("bot"), "runaway"),
        ]
        shown = await client.show_tenant()
        assert len(shown.halts) == 2
        with pytest.raises(weir.Halted) as halted:
            await client.reserve("r1")
        assert halted.value.scope.is_tenant
        assert halted.value.reason == "maintenance"
        assert halted.value.tenant == "halting"
        assert halted.value.status == 409
        await client.clear_halt()
        async with client.session() as s:
            with pytest.raises(weir.Halted) as agent_halt:
                await s.acquire("work", agent="bot")
            assert agent_halt.value.scope == weir.HaltScope("bot")
            async with s.acquire("work", agent="human"):
                pass
        await client.clear_halt(agent="bot")
        assert await client.list_halts() == []


async def test_halts_reach_holders_and_refuse_waiters(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="pushed") as client:
        await client.define_limit("gpu", concurrent=2)
        async with client.session() as s, client.session() as other:
            a1 = await s.acquire("gpu", agent="a1")
            a2 = await s.acquire("gpu", agent="a2")
            waiter = asyncio.ensure_future(other.acquire("gpu", agent="a3", timeout=30))

            async def queued() -> bool:
                return (await client.show_limit("gpu")).waiting == 1

            await async_wait_until(queued, 10, "the third acquire queues")

            await client.set_halt("stop a1", agent="a1")
            why = await asyncio.wait_for(a1.lost(), 10)
            assert why.kind is weir.LostKind.HALTED
            assert why.scope == weir.HaltScope("a1") and why.reason == "stop a1"
            assert a1.lost_reason() == why
            assert a2.lost_reason() is None

            await client.set_halt("everyone")
            why2 = await asyncio.wait_for(a2.lost(), 10)
            assert why2.kind is weir.LostKind.HALTED and why2.scope == weir.TENANT
            # The waiter is refused, with the halt's fields.
            with pytest.raises(weir.Halted) as refused:
                await asyncio.wait_for(waiter, 10)
            assert refused.value.scope.is_tenant and refused.value.reason == "everyone"

            # Halted permits stay held until released.
            assert (await client.show_limit("gpu")).in_use == 2
            await a1.release()
            await a2.release()
            assert (await client.show_limit("gpu")).in_use == 0
        await client.clear_halt()
        await client.clear_halt(agent="a1")


async def test_an_unknown_session_is_typed(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        with pytest.raises(weir.UnknownSession) as unknown:
            await client._transport.call("POST", "/v1/sessions/12345/keepalive")
        assert unknown.value.session == 12345


async def test_status_names_the_leader(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers) as client:
        status = await client.status()
        assert status["leader"] in (1, 2, 3)
        assert len(status["nodes"]) == 3


async def test_limits_apply_all_or_nothing_with_a_dry_run_and_prune(cluster: Cluster) -> None:
    async with weir.AsyncClient(cluster.servers, tenant="files") as client:
        await client.define_limit("stale", concurrent=1)
        limits = {
            "db": weir.LimitSpec(concurrent=3),
            "api": weir.LimitSpec(per_second=10, burst=20, keys_max=100),
        }
        dry = await client.apply_limits(limits, prune=True, dry_run=True)
        assert dry == weir.LimitsChange(["api", "db"], [], ["stale"], [], False)
        assert [limit.name for limit in await client.list_limits()] == ["stale"]

        done = await client.apply_limits(limits, prune=True)
        assert done == weir.LimitsChange(["api", "db"], [], ["stale"], [], True)
        api = await client.show_limit("api")
        assert (api.per_second, api.burst) == (10, 20)

        # One definition that cannot apply refuses the whole apply, naming it.
        bad = {"db": weir.LimitSpec(concurrent=5), "api": weir.LimitSpec(per_second=10)}
        with pytest.raises(weir.Invalid) as invalid:
            await client.apply_limits(bad)
        assert "api" in str(invalid.value)
        assert (await client.show_limit("db")).concurrent == 3

        again = await client.apply_limits(limits)
        assert again == weir.LimitsChange([], [], [], ["api", "db"], True)
