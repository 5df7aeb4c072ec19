"""Fixtures: a shared three-node cluster for the tests that leave it as they found it, a
fresh one for the tests that kill or stop nodes, and a hard time bound on every test."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from harness import Cluster, start_cluster, weir_bin

#: Longest any one test may run (s), fixtures included: past it the test fails.
TEST_BOUND = 240


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """Fails a test that runs longer than :data:`TEST_BOUND` (SIGALRM in the main thread,
    where pytest and the asyncio tests run)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"test ran longer than {TEST_BOUND} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_BOUND)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A plaintext three-node cluster shared by the tests that do not kill nodes."""
    c = start_cluster(weir_bin(), tmp_path_factory.mktemp("shared-cluster"))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A three-node cluster of the test's own, for killing and stopping nodes."""
    c = start_cluster(weir_bin(), tmp_path / "cluster")
    try:
        yield c
    finally:
        c.close()
