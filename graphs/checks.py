"""Checks the ready topologies share: sizes that must be whole numbers, each error naming the topology.

Examples:
    >>> whole_numbers("evolve", n=8, k=4)
    >>> whole_numbers("evolve", n=0)
    Traceback (most recent call last):
    ...
    scaffold._errors.SubsetSizeError: evolve(): n must be an integer of at least 1, got 0
"""

from __future__ import annotations

import scaffold as sf


def whole_numbers(topology: str, least: int = 1, **values: object) -> None:
    """Refuse any of ``values`` that is not an integer (``bool`` is not one) of at least ``least``, with a
    :class:`~scaffold.SubsetSizeError` naming ``topology`` and the parameter."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise sf.SubsetSizeError(f"{topology}(): {name} must be an integer of at least {least}, got {value!r}")
