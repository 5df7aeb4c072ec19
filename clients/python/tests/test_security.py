"""TLS and tokens (G10, docs/security.md) against a cluster with ``[tls]`` from ``weir certs init``
and ``[[tokens]]``: HTTPS verified against the CA, bearer tokens, roles, sessions owned by
their principal, and the environment variables the CLI honours."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
from harness import Cluster, start_cluster, weir_bin

import weir

ADMIN = "py-admin-secret"
TENANT_A = "py-tenant-a-secret"
TENANT_B = "py-tenant-b-secret"
READER = "py-read-secret"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(
        weir_bin(),
        tmp_path_factory.mktemp("secure-cluster"),
        tls=True,
        tokens={ADMIN: "admin", TENANT_A: "tenant:a", TENANT_B: "tenant:b", READER: "read"},
    )
    try:
        yield c
    finally:
        c.close()


def client(c: Cluster, token: str | None, tenant: str = "a") -> weir.AsyncClient:
    return weir.AsyncClient(c.servers, ca=c.ca, token=token, tenant=tenant)


async def test_the_permit_cycle_over_https_with_a_tenant_token(secure: Cluster) -> None:
    assert secure.ca is not None and os.path.isfile(secure.ca)  # noqa: ASYNC240
    async with client(secure, ADMIN) as admin:
        assert all(url.startswith("https://") for url in admin.servers)
        await admin.define_limit("db", concurrent=1, tenant="a")
        await admin.define_limit("db", concurrent=1, tenant="b")
    async with client(secure, TENANT_A) as a, a.session() as s:
        async with s.acquire("db") as permit:
            assert permit.fence > 0
            assert await a.fence_held("db", permit.fence)
            assert s.events_connected or await s.wait_events_connected(10)
        assert (await a.show_limit("db")).in_use == 0


async def test_missing_and_unknown_tokens_are_unauthenticated(secure: Cluster) -> None:
    async with client(secure, None) as anonymous:
        with pytest.raises(weir.Unauthenticated):
            await anonymous.show_limit("db")
    async with client(secure, "not-a-token") as stranger:
        with pytest.raises(weir.Unauthenticated):
            await stranger.session()


async def test_roles_are_enforced(secure: Cluster) -> None:
    async with client(secure, TENANT_A, tenant="b") as a_in_b:
        with pytest.raises(weir.Forbidden):
            await a_in_b.show_limit("db")
        with pytest.raises(weir.Forbidden):
            await a_in_b.define_limit("db", concurrent=5)
    async with client(secure, READER) as reader:
        assert (await reader.show_limit("db")).concurrent == 1
        with pytest.raises(weir.Forbidden):
            await reader.define_limit("db", concurrent=5)
    # Status needs admin.
    async with client(secure, TENANT_A) as a:
        with pytest.raises(weir.Forbidden):
            await a.status()
    async with client(secure, ADMIN) as admin:
        assert (await admin.status())["leader"] in (1, 2, 3)


async def test_a_session_belongs_to_its_principal(secure: Cluster) -> None:
    async with (
        client(secure, TENANT_A) as a,
        client(secure, TENANT_B, tenant="b") as b,
        a.session() as s,
    ):
        with pytest.raises(weir.Forbidden):
            await b._transport.call("POST", f"/v1/sessions/{s.id}/keepalive")
        with pytest.raises(weir.Forbidden):
            await b._transport.call("POST", f"/v1/sessions/{s.id}/release", {"ticket": 1})
        # Following its events is the owner's only.
        with pytest.raises(weir.Forbidden):
            await asyncio.wait_for(
                b._transport.stream(f"/v1/sessions/{s.id}/events", lambda: None,
                                    lambda name, data: None),
                15,
            )
        async with s.acquire("db"):
            pass


async def test_tls_needs_the_clusters_ca(secure: Cluster) -> None:
    async with weir.AsyncClient([f"https://{a}" for a in secure.servers], token=ADMIN) as c:
        with pytest.raises(weir.ProtocolError, match="TLS"):
            await c.show_limit("db", tenant="a")
    # Plain HTTP to a TLS port is not answered as HTTP.
    async with weir.AsyncClient(secure.servers, token=ADMIN, request_deadline=1.0) as c:
        with pytest.raises((weir.Unavailable, weir.OutcomeUnknown)):
            await c.show_limit("db", tenant="a")


def test_the_environment_names_servers_ca_token_and_tenant(
    secure: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert secure.ca is not None
    monkeypatch.delenv("WEIR_HTTP_SERVERS", raising=False)
    monkeypatch.setenv("WEIR_SERVERS", ",".join(secure.servers))
    monkeypatch.setenv("WEIR_CA", secure.ca)
    monkeypatch.setenv("WEIR_TOKEN", TENANT_A)
    monkeypatch.setenv("WEIR_TENANT", "a")
    with weir.Client() as c:
        assert c.servers == [f"https://{s}" for s in secure.servers]
        assert c.tenant == "a"
        with c.session() as s, s.acquire("db") as permit:
            assert permit.fence > 0
    # WEIR_HTTP_SERVERS wins over WEIR_SERVERS (which the CLI reads as client ports).
    monkeypatch.setenv("WEIR_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("WEIR_HTTP_SERVERS", secure.servers[1])
    with weir.Client() as c:
        assert c.servers == [f"https://{secure.servers[1]}"]
        assert c.show_limit("db").concurrent == 1
