"""Ready-made topologies from the literature, each written only with scaffold's public DSL.

Every topology is a graph function: ``topology.build(**params)`` gives a :class:`scaffold.Graph`,
``topology.run_sync({"problem": ...}, models={...})`` runs it with the paper's defaults. Model
aliases (``model="solver"``, ``judge="judge"``, ...) and prompts are build parameters, so one
topology runs on any backend and with the prompts a model was trained on. Sizes have one name
everywhere, as in ``sf.sample(n=...)`` and ``sf.aggregate(k=..., n=...)``: ``n`` is the number of
first samples (a paper's N), ``k`` the size of the set one aggregation reads (K), ``steps`` the
number of aggregation steps (T); each topology's docstring gives its paper's letters::

    import graphs
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, pocket_model
    import scaffold as sf

    g = graphs.rsa.build(n=8, k=4, steps=3, prompt=SOLVE_PROMPT, aggregate_prompt=AGGREGATE_PROMPT)
    result = g.run_sync({"problem": "482+915+307"}, models={"solver": sf.TransformersBackend(pocket_model())})
"""

from graphs.agg_agent import AGG_AGENT_PROMPT, agg_agent
from graphs.agglm import agglm, aggregate_given, ssa
from graphs.best_of_n import best_of_n, parse_score, weighted_majority
from graphs.deepconf import confidence_bar, deepconf
from graphs.evolve import evolve
from graphs.moa import mixture_of_agents, self_moa, self_moa_seq
from graphs.pacore import compact_tail, pacore
from graphs.pairwise import (
    agreement_verdict,
    bradley_terry,
    pairwise_ranking,
    parse_winner,
    population_by_generation,
)
from graphs.parallel_agents import parallel_agents
from graphs.prompts import (
    AGGREGATE_PROMPT,
    COMPACT_PROMPT,
    COMPARE_PROMPT,
    EVOLVE_PROMPT,
    JUDGE_PROMPT,
    MOA_PROMPT,
    REFINE_PROMPT,
    SOLVE_PROMPT,
    SUMMARY_PROMPT,
)
from graphs.react import REACT_PROMPT, react
from graphs.registry import TOPOLOGIES, build_topology, parse_value, pocket_defaults, topology
from graphs.rsa import population_by_step, rsa
from graphs.self_consistency import self_consistency
from graphs.single import single_sample
from graphs.spiral import agglm_data, grpo_group, spiral
from graphs.tree import aggregation_tree

__all__ = [
    # topologies
    "single_sample",
    "self_consistency",
    "rsa",
    "mixture_of_agents",
    "self_moa",
    "self_moa_seq",
    "deepconf",
    "confidence_bar",
    "pacore",
    "compact_tail",
    "evolve",
    "agglm",
    "ssa",
    "aggregate_given",
    "aggregation_tree",
    "best_of_n",
    "weighted_majority",
    "pairwise_ranking",
    "react",
    "REACT_PROMPT",
    "parallel_agents",
    "agg_agent",
    "AGG_AGENT_PROMPT",
    # training topologies
    "grpo_group",
    "spiral",
    "agglm_data",
    # topologies by name
    "TOPOLOGIES",
    "topology",
    "build_topology",
    "parse_value",
    "pocket_defaults",
    # reading results
    "population_by_step",
    "population_by_generation",
    # judges and verifiers
    "parse_score",
    "parse_winner",
    "agreement_verdict",
    "bradley_terry",
    # default prompts
    "SOLVE_PROMPT",
    "AGGREGATE_PROMPT",
    "COMPACT_PROMPT",
    "SUMMARY_PROMPT",
    "MOA_PROMPT",
    "EVOLVE_PROMPT",
    "JUDGE_PROMPT",
    "COMPARE_PROMPT",
    "REFINE_PROMPT",
]
