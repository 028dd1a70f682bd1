"""Scale-out on Ray: one graph's rows over many workers, shared limits, one store, replicated engines.

``graph.map(rows, models=..., cluster=Cluster(workers=4))`` (and ``evaluate(..., cluster=...)``,
``scaffold eval --ray``) runs the same graph on a Ray cluster: rows go to whichever worker has a
free place, results stream back as they finish, every model limit and the budget hold across all
workers (:mod:`scaffold.cluster._limits`), every worker records into the job's one store
(PostgreSQL directly; SQLite through one writer on the caller's machine), and a killed worker's
rows finish elsewhere without sending a recorded call again. :class:`EnginePool` serves a local
model from several replicas. Needs ``pip install 'scaffold-sdk[cluster]'`` (Ray).

Examples:
    >>> from scaffold.cluster import Cluster
    >>> Cluster(workers=2).workers
    2
"""

from scaffold.cluster._cluster import Cluster
from scaffold.cluster._engines import EnginePool, EngineReplica, ReplicaStats, pick_replica

__all__ = [
    # running a job on a cluster
    "Cluster",
    # replicated local engines
    "EnginePool",
    "EngineReplica",
    "ReplicaStats",
    "pick_replica",
]
