"""A cluster of two data groups: a client speaks to the group its ``group`` names (the
``Weir-Group`` header on every request), holds the permits of the tenants placed there,
and a client of another group is refused ``WrongGroup`` naming the tenant's."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import start_cluster, weir_bin

import weir


async def test_a_client_of_a_group_holds_the_permits_of_its_tenants(tmp_path: Path) -> None:
    c = start_cluster(weir_bin(), tmp_path / "cluster", extra=["groups = 2"])
    try:
        async with weir.AsyncClient(c.servers, tenant="b") as admin:
            assert await admin.place_tenant(2) == 2
            assert await admin.place_tenant() == 2
            with pytest.raises(weir.WrongGroup) as placed:
                await admin.place_tenant(1)
            assert placed.value.group == 2
        async with weir.AsyncClient(c.servers, tenant="b", group=2) as two:
            await two.define_limit("db", concurrent=1)
            async with two.session(ttl=3) as s, s.acquire("db") as p:
                assert p.fence > 0
                assert (await two.show_limit("db")).in_use == 1
        async with (
            weir.AsyncClient(c.servers, tenant="b") as default,
            default.session(ttl=3) as s,
        ):
            with pytest.raises(weir.WrongGroup) as refused:
                await s.acquire("db")
        assert (refused.value.tenant, refused.value.group, refused.value.status) == ("b", 2, 421)
        assert "open one with the header `Weir-Group: 2`" in refused.value.message
        with pytest.raises(weir.Invalid, match="Weir-Group header names a data group"):
            async with weir.AsyncClient(c.servers, tenant="b", group=3) as three:
                await three.show_limit("db")
    finally:
        c.close()
