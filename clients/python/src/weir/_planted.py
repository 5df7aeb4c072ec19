"""Planted bugs: negative controls for the partition harness (``jepsen/planted.sh``).

The Python side of ``crates/weir-core/src/planted.rs``. A plant is on only when the
interpreter was started with ``-X weir_planted`` and ``WEIR_PLANT`` names one of
:data:`PLANTS`: an application never passes that flag, and the harness passes it only
when it is itself a planted build. Otherwise :func:`is_on` answers ``False`` and every
plant's branch is dead. Other names in ``WEIR_PLANT`` are plants of the Rust side
(servers, the Rust library, the CLI) and leave this client as it is.

Invariants: at most one plant is on in a process, read once at import; each plant is one
small branch marked ``# PLANTED(<name>)`` at the exact spot of the bug.
"""

from __future__ import annotations

import os
import sys

#: The plants whose branches are in this client.
PLANTS = frozenset({"python-told-late"})


def _active() -> str | None:
    if "weir_planted" not in sys._xoptions:
        return None
    name = os.environ.get("WEIR_PLANT")
    return name if name in PLANTS else None


#: The plant switched on in this process, if any.
ACTIVE = _active()


def is_on(name: str) -> bool:
    """Whether the plant ``name`` is on in this process."""
    return name == ACTIVE
