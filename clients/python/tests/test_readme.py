"""Runs every ```python readme-example block of the package README against a real
cluster, as a script of its own, with the environment the README says to set.

The blocks of the section "Four examples" are the four examples every Weir client's README
shows (a permit held while work runs, a keyed take, a several-part request, a loss
noticed): there must be exactly four, each must pass ``mypy --strict`` and print what it
shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harness import PACKAGE, Cluster

README = PACKAGE / "README.md"
BLOCK = re.compile(r"```python readme-example\n(.*?)```", re.S)
FOUR_HEADING = "## Four examples\n"


def sections(text: str) -> tuple[str, str]:
    """The README's section "Four examples", and the rest of it."""
    start = text.index(FOUR_HEADING)
    end = text.find("\n## ", start + len(FOUR_HEADING))
    end = len(text) if end < 0 else end + 1
    return text[start:end], text[:start] + text[end:]


FOUR_TEXT, OTHER_TEXT = sections(README.read_text())
FOUR = BLOCK.findall(FOUR_TEXT)
OTHERS = BLOCK.findall(OTHER_TEXT)

#: What each of the four examples must print, in README order.
FOUR_PRINT = [
    r"done under fence \d+",
    r"(alice: served\n){2}alice: busy, retry in \d+\.\d s\nbob: served",
    r"db slot and 150 tokens under fence \d+\nsettled: 30 tokens returned\n"
    r"refused by Part\(limit='model-tokens', units=5000",
    r"stopped at step \d+ - halted \(agent release-bot\): bad rollout",
]


def run_example(cluster: Cluster, code: str) -> str:
    """Runs `code` as a script against `cluster`; answers what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_")}
    env["WEIR_HTTP_SERVERS"] = ",".join(cluster.servers)
    env["WEIR_SERVERS"] = "127.0.0.1:1"  # the CLI's client ports: not read when the above is
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    print(done.stdout)
    return done.stdout


def test_the_readme_has_four_examples_and_more() -> None:
    assert len(FOUR) == len(FOUR_PRINT)
    assert len(OTHERS) >= 3


def test_the_four_examples_type_check(tmp_path: Path) -> None:
    """`mypy --strict` on the four examples, as a user's scripts importing ``weir``."""
    files = []
    for i, code in enumerate(FOUR):
        file = tmp_path / f"example{i + 1}.py"
        file.write_text(code)
        files.append(str(file))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *files],
        cwd=PACKAGE, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("index", range(len(FOUR)))
def test_one_of_the_four_examples_runs(cluster: Cluster, index: int) -> None:
    printed = run_example(cluster, FOUR[index])
    assert re.search(FOUR_PRINT[index], printed), printed


@pytest.mark.parametrize("index", range(len(OTHERS)))
def test_a_readme_example_runs(cluster: Cluster, index: int) -> None:
    run_example(cluster, OTHERS[index])
