"""A cluster of two data groups: a client speaks to the group its ``group`` names (the
``Weir-Group`` header on every request), holds the permits of the tenants placed there,
and a client of another group is refused ``WrongGroup`` naming the tenant's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from harness import Cluster, start_cluster, weir_bin

import weir


def place(c: Cluster, tenant: str, group: int) -> None:
    """Places ``tenant`` in ``group`` on the binary port (the CLI): a placement has no HTTP
    route, and is made once and for good."""
    client_ports = ",".join(f"127.0.0.1:{n.client_port}" for n in c.nodes)
    placed = subprocess.run(
        [str(c.weir), "tenant", "place", str(group), "--tenant", tenant],
        env={**os.environ, "WEIR_SERVERS": client_ports},
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert f"{tenant} lives in group {group}" in placed.stdout


async def test_a_client_of_a_group_holds_the_permits_of_its_tenants(tmp_path: Path) -> None:
    c = start_cluster(weir_bin(), tmp_path / "cluster", extra=["groups = 2"])
    try:
        place(c, "b", 2)
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
