"""A pocket model: a tiny reasoning model and its task, so the whole pipeline runs offline on a CPU.

The task (:class:`PocketTask`) adds a few n-digit numbers with worked, column-by-column steps and a
``\\boxed{}`` answer, checked with math-verify; problems come from a seeded generator in the
JSONL schema of the shared data sets, and the train, validation and test splits never overlap.
The model is a ~0.7M-parameter Qwen2 decoder over a character tokenizer, trained from scratch
here on worked solutions and on aggregations of candidate solutions (half of them its own
samples), and kept at the checkpoint that best meets the aggregation regime (:class:`Regime`)
on validation problems: right about 40% of the time at temperature 1, its vote of 8 samples
better than one, and its own aggregation of 4 of its samples better than their vote, so that
sampling, voting and aggregating all matter. It is saved with ``save_pretrained``, so
:class:`~scaffold.backends.TransformersBackend`, a vLLM server and the trainer load the same
directory.

:data:`SOLVE_PROMPT` and :data:`AGGREGATE_PROMPT` are the exact prompts it was trained on::

    import scaffold as sf
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask, pocket_model

    @sf.graph
    def rsa(problem, *, n: int = 8, k: int = 4, steps: int = 1):
        population = sf.sample(SOLVE_PROMPT, model="pocket", n=n)
        for _ in range(steps):
            population = sf.aggregate(population, model="pocket", prompt=AGGREGATE_PROMPT, k=k, n=n)
        return sf.vote(population)

    backend = sf.TransformersBackend(pocket_model())  # built on first use (about 3 minutes on 2 cores), then cached
    row = PocketTask().problems(1, seed=0, split="test")[0]
    print(rsa.run_sync({"problem": row["problem"]}, models={"pocket": backend}, store=None).answer, row["answer"])

Needs the ``train`` extra (torch, transformers, tokenizers) to build or run the model; the task
and the prompts need nothing.
"""

from scaffold.pocket._agent import (
    AGENT_PROMPT,
    AGENT_TEMPLATE,
    AgentReport,
    AgentScores,
    PocketAgentConfig,
    build_pocket_agent,
    evaluate_agent,
    pocket_agent,
)
from scaffold.pocket._cache import cache_root, load_report, pocket_model, pocket_task
from scaffold.pocket._config import BuildReport, PocketConfig
from scaffold.pocket._evaluate import PocketScores, evaluate_pocket, score_pocket
from scaffold.pocket._parts import PartsTask
from scaffold.pocket._parts_build import PartsConfig, PartsRegime, PartsReport, build_parts_model, parts_model
from scaffold.pocket._parts_eval import PartsScores, score_parts
from scaffold.pocket._prompts import (
    AGGREGATE_PROMPT,
    PARTS_AGGREGATE_PROMPT,
    PARTS_SOLVE_PROMPT,
    SOLVE_PROMPT,
    aggregate_prompt,
    solve_prompt,
)
from scaffold.pocket._regime import Regime
from scaffold.pocket._task import PocketTask, split_of
from scaffold.pocket._tokenizer import build_tokenizer
from scaffold.pocket._train import build_pocket_model, format_report

__all__ = [
    # the task
    "PocketTask",
    "split_of",
    # the prompts it was trained on
    "SOLVE_PROMPT",
    "AGGREGATE_PROMPT",
    "solve_prompt",
    "aggregate_prompt",
    # the model
    "PocketConfig",
    "BuildReport",
    "build_pocket_model",
    "build_tokenizer",
    "pocket_model",
    "cache_root",
    "pocket_task",
    # measuring it
    "Regime",
    "evaluate_pocket",
    "score_pocket",
    "PocketScores",
    "load_report",
    "format_report",
    # the pocket agent: long sums with a calculator
    "AGENT_PROMPT",
    "AGENT_TEMPLATE",
    "PocketAgentConfig",
    "AgentReport",
    "AgentScores",
    "build_pocket_agent",
    "pocket_agent",
    "evaluate_agent",
    # the parts task: where the set matters (set-level RL)
    "PartsTask",
    "PARTS_SOLVE_PROMPT",
    "PARTS_AGGREGATE_PROMPT",
    "PartsConfig",
    "PartsRegime",
    "PartsReport",
    "build_parts_model",
    "parts_model",
    "score_parts",
    "PartsScores",
]
