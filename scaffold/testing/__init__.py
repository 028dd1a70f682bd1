"""Test doubles that ship with the package, so users test their own graphs the same way we do.

- :class:`ScriptedBackend`: answers from a function or a table; records every request;
  can fail, be slow, and measures how many requests were in flight at once.
- :class:`SimulatedBackend`: seeded latency (lognormal by default) for benchmarks and examples.
"""

from scaffold.testing.scripted import ScriptedBackend
from scaffold.testing.simulated import SimulatedBackend

__all__ = ["ScriptedBackend", "SimulatedBackend"]
