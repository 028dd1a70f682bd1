"""Credit assignment: from rewarded, recorded traces to one advantage per trained trace.

Schemes are pure functions ``scheme(traces, rewards, **options) -> list[Credited]`` chosen by name
from :data:`SCHEMES` (``"grpo"``, ``"rloo"``, ``"spiral"``; add one with :func:`register_scheme`),
called through :func:`assign_credit`. Lineage is read from ``Trace.inputs``, nothing else.

**Which traces are credited.** Model traces with status OK and non-empty ``token_ids`` (a failed,
cancelled or skipped call, or one whose backend gave no token ids, has nothing to train on and is
skipped); rule traces (votes, best-of) and external inputs are never trained. An input counts as a
*candidate* only if it is such a model trace of the same run: an aggregation that reads a vote gives
the vote no credit, and credit is not forwarded through rule traces. A trace that needs a reward
(every trace for GRPO/RLOO, every aggregation for SPIRAL) and has none in ``rewards`` is skipped.
Output keeps the order of ``traces``.

**Roles** (:data:`trainers.types.ROLES`): ``"aggregate"`` if the trace has inputs; else ``"search"``
if some aggregation of its run read it; else ``"single"``.

**Groups (GRPO, RLOO, and SPIRAL's aggregation role).** A trace is centred among the traces of the
same run and node that read the same input set (samples of the same prompt). A node whose input sets
were not each read by at least two of its traces — one call per set, as RSA draws its subsets, where
a repeated subset is chance — groups by node instead (else every such trace would get 0). The choice
is made on the recorded structure (all model traces of the node, failed ones included), so a failure
does not change how the survivors are centred.

**SPIRAL, two levels** (the SPIRAL paper's set-level credit; :func:`spiral_set_advantages`): the sets G_i are the
distinct input sets of one aggregation node; f(G_i) = mean reward of the aggregations of G_i;
f̂ = mean_i f(G_i); A(G_i) = f(G_i) − f̂; a search trace y_j gets A_marg(y_j) = mean of A(G_i) over
the sets containing it (in no set: no gradient, left out of the output); an aggregation trace gets
r − mean reward of its own set (optionally divided by that set's std).

**Multi-level rule** (RSA with T steps, any DAG of aggregations): the rule above is applied to every
aggregation node at once, each node being one level whose sets are its traces' recorded input sets.

1. *Aggregation role* — every trace with inputs: A_agg = r − mean of its group (see Groups: its set
   group, or its node for RSA's one call per set), optionally / std of the group.
2. *Set advantages* — per aggregation node ``L`` of a run: for each distinct input set S read by L,
   f(S) = mean reward of L's credited traces reading S; A(S) = f(S) − mean over L's sets of f.
   Per node they sum to zero.
3. *Search role* — every candidate read by some aggregation: A_search = mean of A(S) over all sets S
   (of any node) containing it. A candidate of an aggregation node that falls in none of its sets
   has no search role.
4. *Combination* — a trace with both roles (an intermediate RSA step: an aggregation of the level
   below and a member of sets of the level above) gets
   ``(aggregate_weight * A_agg + search_weight * A_search) / (aggregate_weight + search_weight)``,
   equal weights by default (the mean of its two roles); a trace with one role gets that role's
   advantage. So step0 samples are search-only, step1..step{T-1} both, step{T} aggregation-only.
5. *Singles* — a model trace with no inputs whose node no aggregation read is centred GRPO-style,
   so a graph with no aggregation gets GRPO. A trace whose node-mates were read but which was not
   (a search trace in no set) gets no gradient.

With RSA's one aggregation per set, f(S) = r and A(S) = A_agg, so each level is centred on its own
mean. Departures: the paper defines two levels only; the multi-level combination and the node
fallback are this module's choices. ``scale_by_std`` uses the population std (divisor n) plus ``eps``.
RLOO's baseline for a group of one is the trace itself (advantage 0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from scaffold._answers import equivalent
from scaffold._rules import cluster_answers
from scaffold._types import Status, Trace, TraceKind
from trainers.episodes import fold, unfold
from trainers.types import Credited

Scheme = Callable[..., list[Credited]]
"""``scheme(traces, rewards, **options) -> list[Credited]`` over all recorded traces of some runs."""

_GroupKey = tuple[str, str, frozenset[str] | None]


def group_advantages(
    rewards: Sequence[float], *, baseline: str = "mean", scale_by_std: bool = False, eps: float = 1e-6
) -> list[float]:
    """Rewards minus a group baseline: the group mean (GRPO) or the mean of the others (RLOO, ``"rloo"``).

    ``scale_by_std`` divides by the group's population std plus ``eps``.

    Examples:
        >>> group_advantages([1.0, 0.0, 0.0, 1.0])
        [0.5, -0.5, -0.5, 0.5]
        >>> group_advantages([1.0, 0.0, 0.0], baseline="rloo")
        [1.0, -0.5, -0.5]
    """
    n = len(rewards)
    if n == 0:
        return []
    total = sum(rewards)
    if baseline == "mean":
        advantages = [r - total / n for r in rewards]
    elif baseline == "rloo":
        advantages = [0.0] if n == 1 else [r - (total - r) / (n - 1) for r in rewards]
    else:
        raise ValueError(f"unknown baseline {baseline!r}; expected 'mean' or 'rloo'")
    if scale_by_std:
        std = math.sqrt(sum((r - total / n) ** 2 for r in rewards) / n)
        advantages = [a / (std + eps) for a in advantages]
    return advantages


def set_advantages(set_rewards: Sequence[Sequence[float]]) -> list[float]:
    """A(G_i) = f(G_i) − mean_i f(G_i), where f(G_i) is the mean reward of set i's aggregations.

    Examples:
        >>> set_advantages([[1.0, 0.0], [1.0, 1.0]])
        [-0.25, 0.25]
    """
    if any(len(rs) == 0 for rs in set_rewards):
        raise ValueError("every set needs at least one aggregation reward")
    values = [sum(rs) / len(rs) for rs in set_rewards]
    baseline = sum(values) / len(values) if values else 0.0
    return [v - baseline for v in values]


def spiral_set_advantages(
    n_search: int,
    sets: Sequence[Sequence[int]],
    set_rewards: Sequence[Sequence[float]],
    *,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> tuple[list[float | None], list[list[float]]]:
    """SPIRAL's two-level credit: marginal set advantage per search trace, set-centred per aggregation.

    ``sets[i]`` holds the search-trace indices of G_i, ``set_rewards[i]`` the rewards of its N2
    aggregations. Returns (one advantage per search trace, ``None`` for one in no set; the
    aggregations' advantages, shaped like ``set_rewards``).

    Examples:
        >>> spiral_set_advantages(4, [[0, 1], [1, 2]], [[1.0, 0.0], [1.0, 1.0]])
        ([-0.25, 0.0, 0.25, None], [[0.5, -0.5], [0.0, 0.0]])
    """
    if len(sets) != len(set_rewards):
        raise ValueError(f"{len(sets)} sets but {len(set_rewards)} lists of rewards")
    per_set = set_advantages(set_rewards)
    sums, counts = [0.0] * n_search, [0] * n_search
    for members, advantage in zip(sets, per_set):
        for j in set(members):
            if not 0 <= j < n_search:
                raise ValueError(f"set member {j} is not a search trace index (0..{n_search - 1})")
            sums[j] += advantage
            counts[j] += 1
    search: list[float | None] = [s / c if c else None for s, c in zip(sums, counts)]
    aggregations = [group_advantages(rs, scale_by_std=scale_by_std, eps=eps) for rs in set_rewards]
    return search, aggregations


# ----- recorded traces ---------------------------------------------------------------------------


def trainable(trace: Trace) -> bool:
    """A model trace that finished OK with token ids: the only kind credit assignment trains."""
    return trace.kind is TraceKind.MODEL and trace.status is Status.OK and bool(trace.token_ids)


def role_of(trace: Trace, read: set[str] | frozenset[str]) -> str:
    """``"aggregate"`` if it has inputs, ``"search"`` if its id is in ``read``, else ``"single"``."""
    return "aggregate" if trace.inputs else "search" if trace.id in read else "single"


class _Records:
    """The trainable traces of some runs, indexed once: by id, who read whom, and the centring groups."""

    def __init__(self, traces: Sequence[Trace]) -> None:
        self.traces = [t for t in traces if trainable(t)]
        self.by_id = {t.id: t for t in self.traces}
        self.read: set[str] = set()
        """Ids of candidates (trainable, same run) read by some trace."""
        for t in self.traces:
            for source in t.inputs:
                s = self.by_id.get(source)
                if s is not None and s.run_id == t.run_id:
                    self.read.add(source)
        self.read_nodes = {(self.by_id[i].run_id, self.by_id[i].node) for i in self.read}
        self._by_set = _by_node_sets(traces)

    def group_key(self, trace: Trace) -> _GroupKey:
        """The group a trace is centred in: its input set's, or its node's (see the module docstring)."""
        return (trace.run_id, trace.node, frozenset(trace.inputs) if self._by_set[(trace.run_id, trace.node)] else None)

    def candidates(self, trace: Trace) -> list[str]:
        """The ids of the candidates a trace read (trainable model traces of its run)."""
        by_id = self.by_id
        return [i for i in trace.inputs if i in by_id and by_id[i].run_id == trace.run_id]


def _by_node_sets(traces: Sequence[Trace]) -> dict[tuple[str, str], bool]:
    """Per (run, node) of model traces: True when each of its input sets was read by two or more traces."""
    counts: dict[tuple[str, str, frozenset[str]], int] = {}
    for t in traces:
        if t.kind is TraceKind.MODEL:
            key = (t.run_id, t.node, frozenset(t.inputs))
            counts[key] = counts.get(key, 0) + 1
    out: dict[tuple[str, str], bool] = {}
    for (run, node, _), count in counts.items():
        out[(run, node)] = out.get((run, node), True) and count >= 2
    return out


def _group_name(key: _GroupKey) -> str:
    run, node, inputs = key
    if not inputs:
        return f"{run}/{node}"
    prefix = run + "/"
    members = sorted(i[len(prefix):] if i.startswith(prefix) else i for i in inputs)
    return f"{run}/{node}{{{','.join(members)}}}"


def _centre(
    records: _Records, traces: Sequence[Trace], rewards: Mapping[str, float], **options: Any
) -> dict[str, tuple[float, str]]:
    """Trace id → (advantage within its group, group name), for traces that have a reward."""
    groups: dict[_GroupKey, list[Trace]] = {}
    for t in traces:
        if t.id in rewards:
            groups.setdefault(records.group_key(t), []).append(t)
    out: dict[str, tuple[float, str]] = {}
    for key, members in groups.items():
        name = _group_name(key)
        for t, a in zip(members, group_advantages([rewards[t.id] for t in members], **options)):
            out[t.id] = (a, name)
    return out


def _baseline_scheme(baseline: str) -> Scheme:
    def scheme(
        traces: Sequence[Trace],
        rewards: Mapping[str, float],
        *,
        scale_by_std: bool = False,
        eps: float = 1e-6,
    ) -> list[Credited]:
        records = _Records(traces)
        centred = _centre(records, records.traces, rewards, baseline=baseline, scale_by_std=scale_by_std, eps=eps)
        return [
            Credited(t, centred[t.id][0], role_of(t, records.read), rewards[t.id], centred[t.id][1])
            for t in records.traces
            if t.id in centred
        ]

    return scheme


grpo = _baseline_scheme("mean")
grpo.__name__ = grpo.__qualname__ = "grpo"
grpo.__doc__ = """Every trace is credited by its own reward minus its group's mean (optionally / std)."""
rloo = _baseline_scheme("rloo")
rloo.__name__ = rloo.__qualname__ = "rloo"
rloo.__doc__ = """Every trace is credited by its own reward minus the mean reward of the rest of its group."""


def _search_advantages(
    records: _Records, aggregations: Sequence[Trace], rewards: Mapping[str, float]
) -> dict[str, tuple[float, str]]:
    """Candidate id → (mean set advantage over the sets containing it, the first reader node's name)."""
    sets_by_node: dict[tuple[str, str], dict[frozenset[str], tuple[list[str], list[float]]]] = {}
    for t in aggregations:
        node_sets = sets_by_node.setdefault((t.run_id, t.node), {})
        entry = node_sets.get(frozenset(t.inputs))
        if entry is None:
            entry = node_sets[frozenset(t.inputs)] = (records.candidates(t), [])
        entry[1].append(rewards[t.id])
    sums: dict[str, list[Any]] = {}
    for (run, node), node_sets in sets_by_node.items():
        entries = list(node_sets.values())
        for (members, _), advantage in zip(entries, set_advantages([rs for _, rs in entries])):
            for member in set(members):
                acc = sums.setdefault(member, [0.0, 0, f"{run}/{node}"])
                acc[0] += advantage
                acc[1] += 1
    return {member: (total / count, name) for member, (total, count, name) in sums.items()}


def spiral(
    traces: Sequence[Trace],
    rewards: Mapping[str, float],
    *,
    scale_by_std: bool = False,
    eps: float = 1e-6,
    aggregate_weight: float = 1.0,
    search_weight: float = 1.0,
) -> list[Credited]:
    """SPIRAL's set credit at every aggregation level (the module docstring states the rule)."""
    if aggregate_weight < 0 or search_weight < 0 or aggregate_weight + search_weight <= 0:
        raise ValueError("aggregate_weight and search_weight must be non-negative, not both zero")
    records = _Records(traces)
    # 1) aggregation role and singles: centred within their groups
    aggregations = [t for t in records.traces if t.inputs and t.id in rewards]
    singles = [t for t in records.traces if not t.inputs and (t.run_id, t.node) not in records.read_nodes]
    own = _centre(records, aggregations + singles, rewards, scale_by_std=scale_by_std, eps=eps)
    # 2-3) set advantages per aggregation node, averaged per member
    search = _search_advantages(records, aggregations, rewards)
    # 4) combine the roles each trace has
    out: list[Credited] = []
    for t in records.traces:
        mine, theirs = own.get(t.id), search.get(t.id)
        if mine is not None and theirs is not None:
            advantage = (aggregate_weight * mine[0] + search_weight * theirs[0]) / (aggregate_weight + search_weight)
            group = mine[1]
        elif mine is not None or theirs is not None:
            advantage, group = mine if mine is not None else theirs  # type: ignore[misc]
        else:
            continue
        out.append(Credited(t, advantage, role_of(t, records.read), rewards.get(t.id), group))
    return out


SCHEMES: dict[str, Scheme] = {"grpo": grpo, "rloo": rloo, "spiral": spiral}
"""Credit schemes by name; :func:`assign_credit` picks one."""


def register_scheme(name: str, fn: Scheme) -> None:
    """Add (or replace) a credit scheme: ``fn(traces, rewards, **options) -> list[Credited]``.

    ``fn`` receives every recorded trace; :func:`trainable` and :func:`role_of` help it follow the
    same rules as the built-in schemes.
    """
    SCHEMES[name] = fn


def assign_credit(
    traces: Sequence[Trace], rewards: Mapping[str, float], *, scheme: str = "spiral", turn_discount: float = 1.0,
    **options: Any
) -> list[Credited]:
    """One :class:`Credited` per trainable trace that gets a gradient, by the named scheme.

    ``rewards`` maps trace id → reward (see :func:`trainers.rewards.rewards_from`); ``options``
    go to the scheme (``scale_by_std``, ``eps``; SPIRAL also ``aggregate_weight``, ``search_weight``).
    Agents are credited per episode (:mod:`trainers.episodes`): the scheme sees each agent's final
    trace reading its external inputs, and every turn of the agent gets the agent's advantage times
    ``turn_discount ** (turns after it)``.

    Examples:
        >>> ts = [Trace(id=f"r/s#{i}", run_id="r", node="s", index=i, token_ids=(1,)) for i in range(2)]
        >>> [c.advantage for c in assign_credit(ts, {"r/s#0": 1.0, "r/s#1": 0.0}, scheme="grpo")]
        [0.5, -0.5]
    """
    fn = SCHEMES.get(scheme)
    if fn is None:
        raise ValueError(f"unknown credit scheme {scheme!r}; known schemes: {', '.join(sorted(SCHEMES))}")
    folded, found = fold(traces)
    if not found:
        return fn(traces, rewards, **options)
    return unfold(fn(folded, rewards, **options), found, turn_discount=turn_discount)


# ----- AggLM data mix ----------------------------------------------------------------------------


class SetInfo(NamedTuple):
    """One aggregation set for AggLM's data mix: its members' answers and the reference answer."""

    answers: Sequence[str | None]
    """The extracted answers of the set's members (``None`` where none was found)."""
    reference: str
    """The correct answer."""


def is_hard(answers: Sequence[str | None], reference: str) -> bool:
    """True when the set's majority answer (equivalence-clustered) is wrong or missing.

    Examples:
        >>> is_hard(["1/2", "0.5", "3"], "1/2"), is_hard(["3", "3", "0.5"], "1/2")
        (False, True)
    """
    members = [Trace(id=str(i), run_id="", node="", index=i, answer=a) for i, a in enumerate(answers)]
    clusters = cluster_answers(members)
    return not clusters or not equivalent(clusters[0][0], reference)


def agglm_select(
    sets: Sequence[SetInfo | tuple[Sequence[str | None], str]] | Sequence[Sequence[str | None]],
    reference: str | None = None,
    *,
    easy_fraction: float = 0.5,
    rng: random.Random | int = 0,
) -> list[int]:
    """AggLM's data mix: indices of every hard set plus ``easy_fraction`` of the easy ones, sorted.

    The easy sets kept are ``round(easy_fraction * easy)`` drawn without replacement from ``rng``
    (a ``random.Random`` or a seed); the paper keeps 50%. ``sets`` holds ``(answers, reference)``
    pairs (:class:`SetInfo`), or, when ``reference`` is given, the answers of sets of one problem.

    Examples:
        >>> agglm_select([(["3", "3"], "4"), (["4", "4"], "4"), (["4", "5", "4"], "4")], rng=1)
        [0, 1]
    """
    if not 0.0 <= easy_fraction <= 1.0:
        raise ValueError(f"easy_fraction must be in [0, 1], got {easy_fraction}")
    rand = rng if isinstance(rng, random.Random) else random.Random(rng)
    hard: list[int] = []
    easy: list[int] = []
    pairs: Sequence[Any] = [(answers, reference) for answers in sets] if reference is not None else sets
    for i, (answers, truth) in enumerate(pairs):
        (hard if is_hard(answers, truth) else easy).append(i)
    kept = rand.sample(easy, int(easy_fraction * len(easy) + 0.5))
    return sorted(hard + kept)
