"""The partition harness's Python holder (``jepsen_holder.py``) against a real cluster: the
history it writes has the harness's shape and clock, and a holder paused past its TTL
records a belief that ended at its deadline, before the permit could go to anyone else, and
that it was told of the loss as soon as it resumed."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from harness import HERE, Cluster

import weir

DRIVER = HERE / "jepsen_holder.py"


def run_holder(cluster: Cluster, limit: str, seconds: float, *extra: str) -> list[dict[str, Any]]:
    """Runs the driver for ``seconds``, then closes its stdin; answers its ops."""
    epoch = round(weir.boot_now() * 1e9)
    with tempfile.TemporaryFile("w+") as out:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), "--servers", ",".join(cluster.servers),
             "--tenant", "jepsen-py", "--limit", limit, "--cap", "1", "--process", "7",
             "--epoch-boot-ns", str(epoch), *extra],
            stdin=subprocess.PIPE, stdout=out, text=True,
        )
        try:
            time.sleep(seconds)
            assert driver.stdin is not None
            driver.stdin.close()
            assert driver.wait(timeout=30) == 0
        finally:
            driver.kill()
            driver.wait()
        out.seek(0)
        ops = [json.loads(line) for line in out]
    ended = round(weir.boot_now() * 1e9) - epoch
    for op in ops:
        assert op["process"] == 7 and 0 <= op["time_ns"] <= ended
    return ops


def of(ops: list[dict[str, Any]], f: str, kind: str = "ok") -> list[dict[str, Any]]:
    return [o["value"] for o in ops if o["f"] == f and o["kind"] == kind]


def test_the_holder_records_acquires_beliefs_and_releases(cluster: Cluster) -> None:
    with weir.Client(cluster.servers, tenant="jepsen-py") as client:
        client.define_limit("py-mutex", concurrent=1)
    ops = run_holder(cluster, "py-mutex", 3.0, "--hold-ms", "20,60")
    # Jepsen's shape: each invoke completed before the next (facts aside).
    open_f = None
    for op in ops:
        if op["f"] in ("hold", "client-pause"):
            continue
        if op["kind"] == "invoke":
            assert open_f is None
            open_f = op["f"]
        else:
            assert op["f"] == open_f
            open_f = None
    acquired, holds, released = of(ops, "acquire"), of(ops, "hold"), of(ops, "release")
    assert len(acquired) >= 5
    assert [h["fence"] for h in holds] == [a["fence"] for a in acquired]
    assert len(released) == len(holds)
    for h in holds:
        assert h["limit"] == "py-mutex" and h["cap"] == 1 and h["lost"] is None
        assert h["application"] is True and h["told_ns"] is None and h["client"] == "python"
        assert h["from_ns"] <= h["to_ns"] <= h["seen_ns"] and h["to_ns"] <= h["deadline_ns"]
    # One holder of a limit of one: its beliefs follow each other.
    for a, b in itertools.pairwise(holds):
        assert a["to_ns"] <= b["from_ns"]


def test_a_holder_paused_past_its_ttl_believes_only_until_its_deadline(
    cluster: Cluster,
) -> None:
    with weir.Client(cluster.servers, tenant="jepsen-py") as client:
        client.define_limit("py-paused", concurrent=1)
    ops = run_holder(cluster, "py-paused", 6.0, "--ttl-ms", "1000", "--hold-ms", "100,100",
                     "--pause-every", "1", "--pause-ms", "2500,2500")
    pauses = of(ops, "client-pause")
    assert pauses, ops
    first = pauses[0]
    # Resumed 2.5 s into a 1 s TTL: the deadline had passed, and the client says so.
    assert first["resumed_ns"] > first["deadline_ns"]
    assert first["lost"] == str(weir.Lost(weir.LostKind.DEADLINE))
    hold = next(h for h in of(ops, "hold") if h["fence"] == first["fence"])
    assert hold["to_ns"] == hold["deadline_ns"] < first["resumed_ns"]
    # Stopped whole, it is judged by G2's deadline, and by what it was told once resumed:
    # at the resume itself.
    assert hold["application"] is False and hold["resumed_ns"] == first["resumed_ns"]
    assert first["resumed_ns"] <= hold["told_ns"] <= hold["seen_ns"]
