"""``concat``: several sets joined in order. No job and no new trace: its slots are its parts' slots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaffold._kinds.registry import expands
from scaffold._nodes import ConcatNode

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext


@expands(ConcatNode)
def expand_concat(run: RunContext, node: ConcatNode) -> list[Slot]:
    return [slot for part in node.parts for slot in run.slots[part.id]]
