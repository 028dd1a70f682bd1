"""``Cluster``: where and how wide a job runs on Ray.

Ray is imported only when a job starts. ``address=None`` joins the cluster this process is
already connected to, or else starts a local one (``ray.init()``); ``"auto"`` or
``"ray://host:10001"`` joins a running cluster.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from scaffold._errors import ClusterError
from scaffold._result import RunResult
from scaffold._runner import MapRequest


@dataclass(frozen=True)
class Cluster:
    """A Ray cluster to run ``Graph.map`` or an evaluation on: a :class:`~scaffold.Runner`.

    Args:
        address: the cluster to join (``None``: the one already connected, else a new local one;
            ``"auto"``; ``"ray://HOST:PORT"``).
        workers: row workers (Ray actors); each runs the async executor on its own rows.
        concurrency: rows in flight per worker (``None``: the ``concurrency`` given to ``map``).
        num_cpus: CPUs Ray reserves for each worker (fractions allowed).
        max_restarts: workers started in place of ones that died, over the whole job.
        runtime_env: Ray's ``runtime_env`` for the workers (``env_vars``, ``working_dir``...).

    Examples:
        >>> cluster = Cluster(workers=4, concurrency=32)
        >>> cluster.workers, cluster.address
        (4, None)
    """

    address: str | None = None
    workers: int = 2
    concurrency: int | None = None
    num_cpus: float = 1.0
    max_restarts: int = 4
    runtime_env: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ClusterError(f"a cluster job needs at least one worker, got {self.workers}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ClusterError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.num_cpus < 0 or self.max_restarts < 0:
            raise ClusterError("num_cpus and max_restarts cannot be negative")

    def map(self, request: MapRequest) -> AsyncIterator[RunResult]:
        """``request``'s rows on this cluster's workers, results in completion order (:mod:`scaffold.cluster`)."""
        from scaffold.cluster._map import map_on_cluster  # Ray and the workers' code load with the first job

        return map_on_cluster(request, self)

    def connect(self) -> Any:
        """Import Ray and join (or start) the cluster; returns the ``ray`` module."""
        try:
            import ray
        except ImportError:
            raise ClusterError("running on a cluster needs Ray: pip install 'scaffold-sdk[cluster]'") from None
        if not ray.is_initialized():
            if self.address is None:  # a local cluster of our own: no auth token under the home directory
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         runtime_env=self.runtime_env or None)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a new local one"
                raise ClusterError(f"cannot join the Ray cluster at {where}: {exc}") from exc
        return ray

    def machines(self) -> int:
        """Alive machines (Ray nodes) in the connected cluster."""
        import ray

        return sum(1 for node in ray.nodes() if node.get("Alive"))
