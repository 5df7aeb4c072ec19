"""The conformance driver: every scenario of ``tests/conformance/scenarios.json`` run with this
client against real clusters (``tests/conformance/README.md`` describes the steps), one line
each: ``conformance python <name>: pass|fail|skip (<reason>)``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Cluster, Proxy, start_cluster, weir_bin

import weir

SCENARIOS = Path(__file__).resolve().parents[3] / "tests" / "conformance" / "scenarios.json"
FILE: dict[str, Any] = json.loads(SCENARIOS.read_text())
assert FILE["version"] == 1, "this driver reads version 1 of scenarios.json"

#: Scenarios this client cannot run, with the reason (clients/python/README.md lists them).
SKIPS: dict[str, str] = {}

REFUSALS: dict[str, type[BaseException]] = {
    "Busy": weir.Busy, "TooLarge": weir.TooLarge, "UnknownLimit": weir.UnknownLimit,
    "Halted": weir.Halted, "TimedOut": weir.TimedOut, "Forbidden": weir.Forbidden,
    "Unauthorized": weir.Unauthenticated,
}


class StepFailed(Exception):
    pass


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Cluster]]:
    kinds = {s["cluster"] for s in FILE["scenarios"]}
    out: dict[str, Cluster] = {}
    try:
        if "plain" in kinds:
            out["plain"] = start_cluster(weir_bin(), tmp_path_factory.mktemp("conf-plain"))
        if "secure" in kinds:
            tokens = {t["secret"]: t["role"] for t in FILE["tokens"].values() if t["role"]}
            out["secure"] = start_cluster(weir_bin(), tmp_path_factory.mktemp("conf-secure"),
                                          tls=True, tokens=tokens)
        yield out
    finally:
        for c in out.values():
            c.close()


def check_outcome(expect: dict[str, Any] | None, error: BaseException | None,
                  success: str) -> None:
    want = (expect or {}).get("outcome", success)
    if want != "refused":
        if error is not None:
            raise StepFailed(f"want {want}, got {error!r}")
        return
    assert expect is not None
    kind = expect["error"]
    if error is None:
        raise StepFailed(f"want refused {kind}, got {success}")
    if kind == "TlsUntrusted":
        if isinstance(error, weir.WeirError) and "TLS verification failed" in str(error):
            return
        raise StepFailed(f"want refused TlsUntrusted, got {error!r}")
    if not isinstance(error, REFUSALS[kind]):
        raise StepFailed(f"want refused {kind}, got {error!r}")


class Run:
    def __init__(self, cluster: Cluster, scenario: dict[str, Any]) -> None:
        self.c = cluster
        self.s = scenario
        self.tenant = scenario["name"]
        admin = FILE["tokens"]["admin"]["secret"] if cluster.tls else None
        self.admin = weir.AsyncClient(cluster.servers, ca=cluster.ca, token=admin,
                                      tenant=self.tenant)
        self.http = cluster.http_client(token=admin)
        self.proxies: list[Proxy] = []
        servers = cluster.servers
        if scenario.get("proxied"):
            self.proxies = [Proxy(n.http_port) for n in cluster.nodes]
            servers = [p.addr for p in self.proxies]
        self.clients = {"default": weir.AsyncClient(servers, ca=cluster.ca, token=admin,
                                                    tenant=self.tenant)}
        self.sessions: dict[str, weir.AsyncSession] = {}
        self.owner: dict[str, str] = {}
        self.permits: dict[str, weir.AsyncPermit] = {}
        self.pending: dict[str, asyncio.Task[weir.AsyncPermit]] = {}

    async def close(self) -> None:
        for t in self.pending.values():
            t.cancel()
        for s in self.sessions.values():
            with contextlib.suppress(TimeoutError, weir.WeirError):
                await asyncio.wait_for(s.close(), 5)
        for cl in [*self.clients.values(), self.admin]:
            await cl.aclose()
        self.http.close()
        for p in self.proxies:
            p.close()

    def fence(self, name: str) -> int:
        return self.permits[name].fence

    def check_grant(self, expect: dict[str, Any] | None, p: weir.AsyncPermit) -> None:
        if not expect:
            return
        if "fence_gt" in expect and not p.fence > self.fence(expect["fence_gt"]):
            raise StepFailed(f"fence {p.fence} not above {expect['fence_gt']}'s "
                             f"{self.fence(expect['fence_gt'])}")
        if "same_fence_as" in expect and p.fence != self.fence(expect["same_fence_as"]):
            raise StepFailed(f"fence {p.fence}, not {expect['same_fence_as']}'s")

    async def limit_status(self, limit: str, key: str | None) -> dict[str, Any]:
        path = f"/v1/tenants/{self.tenant}/limits/{limit}" + (f"/keys/{key}" if key else "")

        def get() -> dict[str, Any]:
            r = self.http.get(f"{self.c.scheme}://{self.c.servers[0]}{path}")
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return body

        return await asyncio.to_thread(get)

    async def step(self, st: dict[str, Any]) -> None:
        do = st["do"]
        expect = st.get("expect")
        cl = self.clients.get(st.get("client", "default"))
        if do == "connect":
            token = FILE["tokens"][st["token"]]["secret"] if st.get("token") else None
            if st.get("ca"):
                self.clients[st["as"]] = weir.AsyncClient(self.c.servers, ca=self.c.ca,
                                                          token=token, tenant=self.tenant)
            else:
                urls = [f"https://{s}" for s in self.c.servers]
                self.clients[st["as"]] = weir.AsyncClient(urls, token=token, tenant=self.tenant)
        elif do == "open_session":
            assert cl is not None
            err: BaseException | None = None
            try:
                session = await cl.session(ttl=st["ttl_ms"] / 1000)
            except weir.WeirError as e:
                err = e
            else:
                if st.get("as"):
                    self.sessions[st["as"]] = session
                    self.owner[st["as"]] = st.get("client", "default")
            check_outcome(expect, err, "opened")
        elif do == "acquire":
            session = self.sessions[st["session"]]
            kwargs: dict[str, Any] = {
                "priority": st.get("priority", 0), "wait": st.get("wait", True),
                "key": st.get("key"), "estimate": st.get("estimate", False),
                "timeout": st["timeout_ms"] / 1000 if "timeout_ms" in st else 10.0,
                "ticket": st.get("ticket"),
            }
            if st.get("parts"):
                kwargs["parts"] = [weir.Part(p["limit"], p.get("units", 1), p.get("key"))
                                   for p in st["parts"]]
            units = st.get("units", 1)
            if st.get("background"):
                kwargs["timeout"] = 30.0
                self.pending[st["as"]] = asyncio.ensure_future(
                    session.acquire(st["limit"], units, **kwargs))
                return
            err = None
            try:
                p = await session.acquire(st["limit"], units, **kwargs)
            except weir.WeirError as e:
                err = e
            check_outcome(expect, err, "granted")
            if err is None:
                if st.get("as"):
                    self.permits[st["as"]] = p
                self.check_grant(expect, p)
        elif do == "await":
            task = self.pending.pop(st["permit"])
            done, _ = await asyncio.wait({task}, timeout=st["within_ms"] / 1000)
            if not done:
                task.cancel()
                raise StepFailed(f"{st['permit']}: no outcome within {st['within_ms']} ms")
            err = task.exception()
            check_outcome(expect, err, "granted")
            if err is None:
                self.permits[st["permit"]] = task.result()
                self.check_grant(expect, task.result())
        elif do == "release":
            await self.permits[st["permit"]].release()
        elif do == "settle":
            settled = await self.permits[st["permit"]].settle(st["cost"])
            if expect and "status" in expect:
                status = "overrun" if settled.overrun_tokens else "settled"
                if status != expect["status"]:
                    raise StepFailed(f"settled {settled!r}, want {expect['status']}")
        elif do == "take":
            assert cl is not None
            err = None
            parts = [weir.Part(p["limit"], p.get("units", 1), p.get("key"))
                     for p in st.get("parts", [])]
            try:
                await cl.take(st["limit"], st.get("units", 1), key=st.get("key"),
                              parts=parts or None)
            except weir.WeirError as e:
                err = e
            check_outcome(expect, err, "taken")
        elif do in ("set_halt", "clear_halt"):
            actor = self.clients[st["client"]] if st.get("client") else self.admin
            err = None
            try:
                if do == "set_halt":
                    await actor.set_halt(st["reason"])
                else:
                    await actor.clear_halt()
            except weir.WeirError as e:
                err = e
            check_outcome(expect, err, "ok")
        elif do == "freeze_keepalives":
            if self.owner.get(st["session"]) != "default" or not self.proxies:
                raise StepFailed("the session's client is not behind proxies")
            for proxy in self.proxies:
                proxy.cut()
        elif do == "expect_held":
            why = self.permits[st["permit"]].lost_reason()
            if why is not None:
                raise StepFailed(f"{st['permit']} believed lost: {why}")
        elif do == "expect_lost":
            try:
                why = await asyncio.wait_for(self.permits[st["permit"]].lost(),
                                             st["within_ms"] / 1000)
            except TimeoutError:
                raise StepFailed(f"{st['permit']} still believed held "
                                 f"{st['within_ms']} ms after the step began") from None
            if st.get("reason") and why.kind.value != st["reason"]:
                raise StepFailed(f"{st['permit']} lost ({why.kind.value}), want {st['reason']}")
        elif do == "expect_limit":
            deadline = time.monotonic() + st.get("within_ms", 0) / 1000
            while True:
                got = await self.limit_status(st["limit"], st.get("key"))
                miss = [f"{k} {got.get(k)}, want {v}" for k, v in st["expect"].items()
                        if got.get(k) != v]
                if not miss:
                    break
                if time.monotonic() >= deadline:
                    raise StepFailed(f"{st['limit']}: {', '.join(miss)}")
                await asyncio.sleep(0.05)
        elif do == "sleep":
            await asyncio.sleep(st["ms"] / 1000)
        elif do == "close":
            await self.sessions.pop(st["session"]).close()
        else:
            raise StepFailed(f"unknown step {do!r}")

    async def run(self) -> None:
        for limit in self.s["limits"]:
            await self.admin.define_limit(
                limit["name"], concurrent=limit["concurrent"], per_second=limit["per_second"],
                burst=limit["burst"] or None, keyed=limit["keyed"])
        for i, st in enumerate(self.s["steps"], 1):
            try:
                await self.step(st)
            except (StepFailed, weir.WeirError, KeyError, httpx.HTTPError) as e:
                raise StepFailed(f"step {i} ({st['do']}): {e}") from e


@pytest.mark.parametrize("scenario", FILE["scenarios"], ids=lambda s: s["name"])
async def test_conformance(scenario: dict[str, Any], clusters: dict[str, Cluster],
                           capsys: pytest.CaptureFixture[str]) -> None:
    name = scenario["name"]
    if name in SKIPS:
        with capsys.disabled():
            print(f"conformance python {name}: skip ({SKIPS[name]})")
        pytest.skip(SKIPS[name])
    run = Run(clusters[scenario["cluster"]], scenario)
    try:
        await asyncio.wait_for(run.run(), 60)
    except (TimeoutError, StepFailed) as e:
        with capsys.disabled():
            print(f"conformance python {name}: fail ({e})")
        pytest.fail(f"{name}: {e}")
    finally:
        await run.close()
    with capsys.disabled():
        print(f"conformance python {name}: pass")
