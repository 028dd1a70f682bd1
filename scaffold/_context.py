"""What the running code is part of: the id of the run whose call is being made.

The executor sets it for the duration of :meth:`Run.execute`; every task a run creates copies
it, so a backend answering a call can read it (``EnginePool`` keeps one run's calls on one
replica, for its prefix cache).
"""

from __future__ import annotations

import contextvars

RUN_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("scaffold_run_id", default=None)
"""Set by the executor around a run's code (read it with :func:`current_run_id`)."""


def current_run_id() -> str | None:
    """The id of the run whose code is running here (``None`` outside a run).

    Examples:
        >>> current_run_id() is None
        True
    """
    return RUN_ID.get()
