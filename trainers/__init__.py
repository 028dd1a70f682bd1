"""Training on recorded traces: reward → credit → batch → update, as small functions and one loop.

Credit assignment (:mod:`trainers.credit`) and rewards (:mod:`trainers.rewards`) are pure Python
and import no torch. :func:`train_online` is one loop over a rollout source (:mod:`trainers.rollouts`): this
process by default, or Ray workers (:mod:`trainers.distributed`: ``train_online(...,
cluster=RolloutCluster(workers=2))``).
"""

from trainers.batch import collate, prompt_ids
from trainers.credit import (
    SCHEMES,
    Scheme,
    SetInfo,
    agglm_select,
    assign_credit,
    group_advantages,
    grpo,
    is_hard,
    register_scheme,
    rloo,
    role_of,
    set_advantages,
    spiral,
    spiral_set_advantages,
    trainable,
)
from trainers.distributed import RayRollouts, RolloutCluster
from trainers.export import export_rows, to_dataset, to_tinker_data, to_verl_parquet
from trainers.loop import LoopConfig, batches, credit_runs, rollout_seed, train_offline, train_online, train_step
from trainers.loss import policy_loss, token_logprobs
from trainers.policy import LoraSettings, Policy, PolicyConfig
from trainers.rewards import RewardFn, math_reward, rewards_from
from trainers.rollouts import Collected, LocalRollouts, RolloutSource
from trainers.selection import has_signal, mixed_sets
from trainers.set_signal import SignalReport, set_signal
from trainers.types import ROLES, Credited, RewardedRun, RolloutPolicy, StepMetrics, TrainablePolicy, TrainBatch
from trainers.verifiers_env import verifiers_environment
from trainers.weights import WeightUpdate, apply_update, rollout_version, weight_update

__all__ = [
    # records
    "Credited",
    "RewardedRun",
    "ROLES",
    "TrainBatch",
    "StepMetrics",
    # rewards
    "math_reward",
    "rewards_from",
    "RewardFn",
    # credit assignment
    "assign_credit",
    "SCHEMES",
    "Scheme",
    "register_scheme",
    "grpo",
    "rloo",
    "spiral",
    "group_advantages",
    "set_advantages",
    "spiral_set_advantages",
    "trainable",
    "role_of",
    # AggLM data mix
    "agglm_select",
    "is_hard",
    "SetInfo",
    # after credit: mixed-correctness sets, runs with signal
    "mixed_sets",
    "has_signal",
    # the positive control of a set-RL experiment
    "set_signal",
    "SignalReport",
    # the update
    "TrainablePolicy",
    "RolloutPolicy",
    "Policy",
    "PolicyConfig",
    "LoraSettings",
    "collate",
    "prompt_ids",
    "token_logprobs",
    "policy_loss",
    # the loops
    "LoopConfig",
    "train_online",
    "train_offline",
    "train_step",
    "credit_runs",
    "batches",
    "rollout_seed",
    # where rollouts run
    "RolloutSource",
    "LocalRollouts",
    "Collected",
    # training on a Ray cluster, weight sync
    "RolloutCluster",
    "RayRollouts",
    "WeightUpdate",
    "weight_update",
    "apply_update",
    "rollout_version",
    # exported for training elsewhere (TRL datasets, verl Parquet, Tinker, verifiers environments)
    "export_rows",
    "to_dataset",
    "to_tinker_data",
    "to_verl_parquet",
    "verifiers_environment",
]
