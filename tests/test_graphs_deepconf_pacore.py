"""DeepConf (confidence-filtered, early-stopping self-consistency), Self-MoA-Seq (sliding-window synthesis) and
PaCoRe-style compaction (bounded aggregation prompts), run on scripted backends."""

from __future__ import annotations

import math
import random

import pytest

import graphs
import scaffold as sf
from scaffold._types import Completion, Request, Usage
from scaffold.testing import ScriptedBackend


def confident(right: float, *, seed: int = 0) -> ScriptedBackend:
    """Right answers ("4") with sure tokens; wrong ones ("5" or "6") with unsure tokens, in share 1 - ``right``."""
    rng = random.Random(seed)

    def answer(request: Request) -> Completion:
        good = rng.random() < right
        text = "\\boxed{4}" if good else f"\\boxed{{{rng.choice('56')}}}"
        return Completion(text=text, usage=Usage(10, 20), logprobs=(math.log(0.95 if good else 0.3),) * 20)

    return ScriptedBackend(answer)


def test_deepconf_stops_sampling_once_the_confident_samples_agree():
    backend = confident(0.5)
    result = graphs.deepconf.build(warmup=8, batch=8, budget=64, eta=0.1, tau=0.95).run_sync(
        {"problem": "2+2"}, models={"solver": backend}, store=None)
    assert result.answer == "4"
    assert result.output.metadata["consensus"] >= 0.95
    assert backend.calls == 8  # the sure samples of the warmup already agree: no batch is drawn
    assert result.output.metadata["samples"] == backend.calls


def test_deepconf_samples_to_its_budget_without_consensus_and_weighs_by_confidence():
    backend = confident(0.3, seed=1)
    result = graphs.deepconf.build(warmup=8, batch=8, budget=32, eta=1.0, tau=1.0).run_sync(
        {"problem": "2+2"}, models={"solver": backend}, store=None)
    meta = result.output.metadata
    assert backend.calls == 32 and meta["samples"] == 32 and meta["kept"] == 32  # eta=1 keeps every sample
    assert meta["consensus"] < 1.0
    assert result.answer == "4"  # the sure right samples outweigh the unsure wrong majority
    drawn = [t for t in result.traces if t.kind is sf.TraceKind.MODEL]
    assert sum(t.answer == "4" for t in drawn) < len(drawn) / 2


def test_deepconf_low_keeps_only_the_warmups_surest():
    backend = confident(0.3, seed=2)
    result = graphs.deepconf.build(warmup=8, batch=8, budget=32, eta=0.1, tau=0.95).run_sync(
        {"problem": "2+2"}, models={"solver": backend}, store=None)
    meta = result.output.metadata
    assert meta["bar"] == pytest.approx(0.95) and meta["kept"] < meta["samples"]
    assert result.answer == "4"


def test_deepconf_refuses_bad_settings():
    with pytest.raises(sf.SubsetSizeError, match="budget"):
        graphs.deepconf.build(warmup=16, budget=8)
    with pytest.raises(sf.GraphDefinitionError, match="eta and tau"):
        graphs.deepconf.build(eta=0.0)
    with pytest.raises(sf.GraphDefinitionError, match="measure"):
        graphs.deepconf.build(measure="median")


def test_self_moa_seq_synthesises_window_by_window():
    seen: list[str] = []

    def answer(request: Request) -> str:
        text = request.messages[-1][1]
        seen.append(text)
        return "\\boxed{4} sample" if "Responses:" not in text else "\\boxed{4} synthesis"

    result = graphs.self_moa_seq.build(n=10, window=4).run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(
        answer)}, store=None)
    syntheses = [t for t in result.traces if t.node.startswith("synthesis")]
    assert [t.node for t in syntheses] == ["synthesis1", "synthesis2", "synthesis3"] and result.answer == "4"
    assert [len(t.inputs) for t in syntheses] == [4, 5, 3]  # a window, then the synthesis and the next window
    assert syntheses[1].inputs[0] == syntheses[0].id and syntheses[2].inputs[0] == syntheses[1].id
    samples = {t.id for t in result.traces if t.node == "samples"}
    read = [i for t in syntheses for i in t.inputs if i in samples]
    assert sorted(read) == sorted(samples)  # every sample read exactly once


def test_compaction_bounds_the_aggregation_prompt_as_rounds_grow():
    """Solutions that grow every round: without compaction the aggregation prompt grows with the rounds; with it,
    it stays under k compacted candidates."""

    def growing(request: Request) -> str:
        text = request.messages[-1][1]
        return "work " * (len(text) // 10 + 50) + "\\boxed{4}"  # each answer longer than what it read

    def longest_prompt(graph: sf.Graph) -> int:
        found = graph.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(growing)}, store=None)
        return max(len(t.request.messages[-1][1]) for t in found.traces
                   if t.request is not None and t.node.startswith("step") and t.node != "step0")

    compacted = [longest_prompt(graphs.pacore.build(n=4, k=2, steps=t, max_chars=300)) for t in (1, 2, 4)]
    plain = [longest_prompt(graphs.rsa.build(n=4, k=2, steps=t)) for t in (1, 2, 4)]
    assert plain[2] > 2 * plain[0]  # whole solutions: the prompt grows round after round
    assert max(compacted) < 2 * 300 + 1000 and compacted[2] <= compacted[0] * 1.05  # bounded: k tails and the frame


def test_model_compaction_reads_each_candidate_alone():
    calls: list[int] = []

    def answer(request: Request) -> str:
        calls.append(request.messages[-1][1].count("\\boxed"))
        return "summary: \\boxed{4}"

    result = graphs.pacore.build(n=4, k=2, steps=1, compact="model").run_sync(
        {"problem": "2+2"}, models={"solver": ScriptedBackend(answer)}, store=None)
    compact = [t for t in result.traces if t.node == "compact1"]
    assert len(compact) == 4 and all(len(t.inputs) == 1 for t in compact)
    assert result.answer == "4"
