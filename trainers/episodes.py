"""Agent episodes in recorded traces: an agent's turns, credited as one decision with the agent's final reward.

An agent (``sf.agent``, or ``sf.aggregate(..., tools=...)``) records each turn that called tools as a
model trace ``B.t`` and its final turn as ``B``, the trace sets and votes read (see
:mod:`scaffold._agent`). Every turn was sampled by the policy, so every turn is trained; but only the
final turn has an answer, so only it has a reward. This module folds an episode into its final trace for
credit assignment (the final trace reading only the episode's *external* inputs: the candidates an
aggregating agent read, not its own turns and tool results), so that any scheme sees one decision per
agent: GRPO centres parallel agents, SPIRAL credits the sets of agents an aggregator read. Then it
unfolds the credit: each turn ``t`` of an episode whose final turn is ``T`` gets the episode's advantage
times ``turn_discount ** (T - t)``.

Each turn trains on its own sampled tokens only: its prompt (the conversation so far, tool results
included) is rebuilt and masked out of the loss by :func:`trainers.batch.collate`, like any prompt.

An agent that used up its turns or budget while still calling tools (``AgentLimitError``) has no
trainable final trace, but its turns were the policy's: its episode is credited as a failed answer
(reward 0 from :func:`~trainers.rewards.math_reward`) and its turns are trained on that. An agent
stopped by anything else (a backend error, a cancelled run) is not the policy's doing and is not trained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scaffold._types import Status, Trace, TraceKind
from trainers.types import Credited

__all__ = ["Episode", "episodes", "external_inputs", "fold", "turn_of", "unfold"]

LIMIT_ERROR = "AgentLimitError"
"""The error name of an agent that still called tools on its last allowed turn."""


def turn_of(trace: Trace) -> tuple[str, int] | None:
    """``(episode id, turn)`` of an agent's non-final turn ``B.t``; ``None`` for any other trace.

    Examples:
        >>> t = Trace(id="r/agent#0.1", run_id="r", node="agent", index=0, metadata={"turn": 1})
        >>> turn_of(t)
        ('r/agent#0', 1)
        >>> turn_of(Trace(id="r/agent#0", run_id="r", node="agent", index=0, metadata={"turn": 2})) is None
        True
    """
    turn = trace.metadata.get("turn") if trace.kind is TraceKind.MODEL else None
    if isinstance(turn, bool) or not isinstance(turn, int):
        return None
    suffix = f".{turn}"
    if not trace.id.endswith(suffix):
        return None
    return trace.id[: -len(suffix)], turn


def external_inputs(trace: Trace) -> tuple[str, ...]:
    """A trace's inputs without its own episode's turns and tool results (all of them for a non-agent trace).

    Examples:
        >>> t = Trace(id="r/agg#0", run_id="r", node="agg", index=0, inputs=("r/s#0", "r/agg#0.0", "r/agg#0.0.0"))
        >>> external_inputs(t)
        ('r/s#0',)
    """
    base = turn_of(trace)
    prefix = (base[0] if base else trace.id) + "."
    return tuple(i for i in trace.inputs if not i.startswith(prefix))


@dataclass(frozen=True)
class Episode:
    """One agent's recorded decision: its final trace and the turns before it, in turn order."""

    final: Trace
    """The agent's trace ``B`` (its answer, or the ``AgentLimitError`` it ended with)."""
    turns: tuple[Trace, ...]
    """Its model turns ``B.0``, ``B.1``... that called tools (not the final one)."""

    @property
    def length(self) -> int:
        """The final turn's number (turns are numbered from 0)."""
        turn = self.final.metadata.get("turn")
        if isinstance(turn, int) and not isinstance(turn, bool):
            return turn
        return max((turn_of(t) or ("", -1))[1] for t in self.turns) + 1 if self.turns else 0

    @property
    def trained(self) -> bool:
        """Whether the policy is answerable for how it ended: it answered, or it ran out of turns or budget."""
        if self.final.status is Status.OK:
            return True
        return self.final.status is Status.ERROR and (self.final.error or "").startswith(LIMIT_ERROR)


def episodes(traces: Iterable[Trace]) -> dict[str, Episode]:
    """Episode id → :class:`Episode`, for every agent that took more than one turn.

    A single-turn agent (it answered without a tool) is an ordinary trace and gets no episode.

    Examples:
        >>> ts = [Trace(id="r/a#0.0", run_id="r", node="a", index=0, metadata={"turn": 0}),
        ...       Trace(id="r/a#0", run_id="r", node="a", index=0, metadata={"turn": 1}, inputs=("r/a#0.0",))]
        >>> [(e.final.id, [t.id for t in e.turns]) for e in episodes(ts).values()]
        [('r/a#0', ['r/a#0.0'])]
    """
    by_id: dict[str, Trace] = {}
    turns: dict[str, list[tuple[int, Trace]]] = {}
    for trace in traces:
        by_id[trace.id] = trace
        place = turn_of(trace)
        if place is not None:
            turns.setdefault(place[0], []).append((place[1], trace))
    out: dict[str, Episode] = {}
    for base, members in turns.items():
        final = by_id.get(base)
        if final is None or final.kind is not TraceKind.MODEL:
            continue
        out[base] = Episode(final, tuple(t for _, t in sorted(members, key=lambda pair: pair[0])))
    return out


def fold(traces: Sequence[Trace]) -> tuple[list[Trace], dict[str, Episode]]:
    """The traces as credit assignment should see them, and the episodes folded.

    Every episode's turns and tool traces are left out, and its final trace reads its external inputs
    only. The final trace of an episode that ended in ``AgentLimitError`` stands in as a trainable trace
    (status OK, its last turn's token ids) so that schemes credit it; :func:`unfold` never trains it.
    """
    found = episodes(traces)
    own = {t.id for e in found.values() for t in e.turns}
    folded: list[Trace] = []
    for trace in traces:
        if trace.id in own or (trace.kind is TraceKind.TOOL and _episode_prefix(trace.id) in found):
            continue
        episode = found.get(trace.id)
        if episode is not None:
            trace = dataclasses.replace(trace, inputs=external_inputs(trace))
            if episode.trained and trace.status is not Status.OK:
                trace = dataclasses.replace(trace, status=Status.OK, token_ids=episode.turns[-1].token_ids)
        folded.append(trace)
    return folded, found


def unfold(credited: Sequence[Credited], found: Mapping[str, Episode], *,
           turn_discount: float = 1.0) -> list[Credited]:
    """Each credited final trace of an episode preceded by its turns, credited ``advantage * discount ** (T - t)``.

    An episode whose end the policy is not answerable for (see :attr:`Episode.trained`) is dropped, and a
    stand-in final trace (an ``AgentLimitError``) is not itself trained.
    """
    if not 0.0 <= turn_discount <= 1.0:
        raise ValueError(f"turn_discount must be in [0, 1], got {turn_discount}")
    out: list[Credited] = []
    for item in credited:
        episode = found.get(item.trace.id)
        if episode is None:
            out.append(item)
            continue
        if not episode.trained:
            continue
        last = episode.length
        for turn in episode.turns:
            place = turn_of(turn)
            distance = last - (place[1] if place else last)
            out.append(dataclasses.replace(item, trace=turn, advantage=item.advantage * turn_discount**distance))
        if episode.final.status is Status.OK:
            out.append(dataclasses.replace(item, trace=episode.final))
    return out


def _episode_prefix(trace_id: str) -> str:
    """``B`` of a tool trace ``B.t.j``."""
    return trace_id.rsplit(".", 2)[0] if trace_id.count(".") >= 2 else ""
