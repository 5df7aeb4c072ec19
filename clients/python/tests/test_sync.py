"""The synchronous facade: the same client on a thread of its own."""

from __future__ import annotations

import threading

import pytest
from harness import Cluster, wait_until

import weir


def test_the_blocking_permit_cycle(cluster: Cluster) -> None:
    with weir.Client(cluster.servers, tenant="sync") as client:
        client.define_limit("db", concurrent=1)
        with client.session(ttl=3) as s1, client.session(ttl=3) as s2:
            with s1.acquire("db") as p1:
                assert p1.fence > 0 and p1.lost_reason() is None
                assert client.fence_held("db", p1.fence)
                got: list[weir.Permit] = []
                t = threading.Thread(target=lambda: got.append(s2.acquire("db", timeout=30)))
                t.start()
                wait_until(lambda: client.show_limit("db").waiting == 1, 10, "queued")
                assert s2.queued_position() == 0
            t.join(10)
            assert not t.is_alive() and got
            with got[0] as p2:
                assert p2.fence > p1.fence
            assert client.show_limit("db").in_use == 0
            with pytest.raises(weir.TimedOut), s1.acquire("db"), s2.acquire("db", timeout=0.3):
                pass
        assert client.show_limit("db").in_use == 0


def test_blocking_lost_on_a_halt_and_takes(cluster: Cluster) -> None:
    with weir.Client(cluster.servers, tenant="sync-halt") as client:
        client.define_limit("db", concurrent=2)
        client.define_limit("api", per_second=1, burst=1)
        assert client.take("api") == 0
        with pytest.raises(weir.Busy) as busy:
            client.take("api")
        assert busy.value.retry_after is not None
        with client.session() as s, s.acquire("db", agent="bot") as permit:
            assert permit.lost(timeout=0.3) is None
            client.set_halt("enough", agent="bot")
            why = permit.lost(timeout=10)
            assert why is not None and why.kind is weir.LostKind.HALTED
            assert why.scope == weir.HaltScope("bot")
        client.clear_halt(agent="bot")
        assert client.list_halts() == []


def test_a_blocking_permit_calls_back_once_when_lost_and_never_once_released(
    cluster: Cluster,
) -> None:
    with weir.Client(cluster.servers, tenant="sync-on-lost") as client:
        client.define_limit("db", concurrent=2)
        told: list[tuple[weir.Lost, str]] = []
        called = threading.Event()

        def tell(why: weir.Lost) -> None:
            told.append((why, threading.current_thread().name))
            called.set()

        released_told: list[weir.Lost] = []
        with client.session() as s:
            with s.acquire("db") as early:
                early.on_lost(released_told.append)
            with s.acquire("db", agent="bot") as permit:
                permit.on_lost(tell)
                assert not called.wait(0.3)
                client.set_halt("enough", agent="bot")
                assert called.wait(10), "the callback was never called"
                # Once, on the client's thread, with the reason lost() answers.
                assert permit.lost(timeout=1) == told[0][0]
        client.clear_halt(agent="bot")
        assert [(w.kind, w.scope) for w, _ in told] == [
            (weir.LostKind.HALTED, weir.HaltScope("bot"))]
        assert told[0][1] == "weir-client"
        assert released_told == [], "a permit released first is never reported lost"


def test_a_callback_that_raises_is_logged_and_the_client_goes_on(
    cluster: Cluster, caplog: pytest.LogCaptureFixture,
) -> None:
    with weir.Client(cluster.servers, tenant="sync-on-lost-raise") as client:
        client.define_limit("db", concurrent=1)
        with client.session() as s, s.acquire("db", agent="bot") as permit:

            def fail(why: weir.Lost) -> None:
                raise RuntimeError("the callback failed")

            permit.on_lost(fail)
            client.set_halt("enough", agent="bot")
            assert permit.lost(timeout=10) is not None
            wait_until(lambda: "on_lost callback" in caplog.text, 10, "logged")
        client.clear_halt(agent="bot")
        assert client.show_limit("db").in_use == 0


def test_a_blocking_reask_is_one_holding_and_releasing_the_first_tells_the_second(
    cluster: Cluster,
) -> None:
    with weir.Client(cluster.servers, tenant="sync-reask") as client:
        client.define_limit("db", concurrent=1)
        with client.session(ttl=3) as s:
            first = s.acquire("db", ticket=5)
            again = s.acquire("db", ticket=5, wait=False)
            assert again.fence == first.fence
            assert client.show_limit("db").in_use == 1
            told: list[weir.Lost] = []
            called = threading.Event()

            def tell(why: weir.Lost) -> None:
                told.append(why)
                called.set()

            again.on_lost(tell)
            first.release()
            assert called.wait(5), "the second permit was never told"
            assert told == [weir.Lost(weir.LostKind.RELEASED)]
            assert again.lost(timeout=1) == weir.Lost(weir.LostKind.RELEASED)
            assert client.show_limit("db").in_use == 0
            with pytest.raises(weir.TicketReleased):
                s.acquire("db", ticket=5)
            again.release()
            assert client.show_limit("db").in_use == 0
