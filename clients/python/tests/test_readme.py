"""Runs every ```python readme-example block of the package README against a real
cluster, as a script of its own, with the environment the README says to set."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from harness import PACKAGE, Cluster

README = PACKAGE / "README.md"
EXAMPLES = re.findall(r"```python readme-example\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_a_readme_example_runs(cluster: Cluster, index: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_")}
    env["WEIR_HTTP_SERVERS"] = ",".join(cluster.servers)
    env["WEIR_SERVERS"] = "127.0.0.1:1"  # the CLI's client ports: not read when the above is
    done = subprocess.run(
        [sys.executable, "-c", EXAMPLES[index]],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    print(done.stdout)
