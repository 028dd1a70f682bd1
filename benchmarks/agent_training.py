"""Training the pocket agent on its own rollouts: does RL over multi-turn agent traces raise held-out success?

Protocol (fixed before the runs; nothing tuned on held-out problems):

- **Agent**: the pocket agent (:func:`scaffold.pocket.pocket_agent`, default :class:`PocketAgentConfig`: four
  5-digit numbers, a calculator, half of its tool-offering build examples solved with the tool), built from
  scratch with the run's seed on the machine that runs this. Its figures before training are measured, not
  assumed.
- **Rollouts**: per problem, ``--agents`` (8) independent agents (``sf.agent`` with the calculator, at most 3
  turns, temperature 1, 160 tokens a turn), run through scaffold on the live policy (the transformers backend
  sharing its weights) and recorded with their tool calls.
- **Credit**: GRPO over the parallel agents of a problem: an agent's reward is 1 when its final ``\\boxed{}``
  answer is the sum, else 0 (an agent that runs out of turns scores 0); every turn of an agent gets its
  advantage (:mod:`trainers.episodes`, ``turn_discount`` 1); a turn trains on its own sampled tokens only,
  its prompt and the tool results it read masked out.
- **Update**: ``--steps`` (12) steps of ``--problems`` (8) train-split problems each, full fine-tuning,
  AdamW at ``--lr`` (1e-3, the scale the build itself trains at, divided by three; no sweep), PPO clip 0.2,
  token-normalised loss.
- **Measure**: ``--eval`` (200) test-split problems (seed 0, never trained on), one agent each at
  temperature 1, sampled with one evaluation seed before and after training (common random numbers), on
  the same backend type: ``success`` (the answer is the sum), ``tool_use``, success with and without the
  tool.
- **Seeds** 0, 1, 2 (the build, the training problems and every sampled choice); every seed is reported.
  Interval: 95% two-level bootstrap over seeds and problems of the paired difference after − before
  (:func:`scaffold.evaluation.seeds_bootstrap_ci`).

Last line: one JSON object with ``bench``, ``pocket_agent_before`` and ``pocket_agent_after`` (mean success
over seeds), ``pocket_agent_ci95`` ([low, high] of the improvement), ``seeds``, and per seed its figures
(``pocket_agent_runs``). ``benchmarks/agents.py`` runs it too and reports the same keys.

Usage: python benchmarks/agent_training.py [--seeds 0 1 2] [--steps 12] [--problems 8] [--agents 8]
       [--eval 200] [--lr 1e-3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaffold as sf  # noqa: E402
from scaffold.evaluation import seeds_bootstrap_ci  # noqa: E402
from scaffold.pocket import AGENT_PROMPT, PocketAgentConfig, evaluate_agent, pocket_agent  # noqa: E402
from scaffold.tools import calculator  # noqa: E402

EVAL_SEED = 1234
"""Every evaluation samples with this seed."""
SAMPLING = {"temperature": 1.0, "max_tokens": 160}


def agents_graph(n: int) -> sf.Graph:
    """``n`` independent calculator agents on one problem (GRPO's group)."""

    @sf.graph(name="pocket_agents")
    def pocket_agents(problem: str, *, n: int) -> Any:
        found = sf.agent(AGENT_PROMPT, model="agent", tools=[calculator], n=n, max_turns=3, name="agent",
                         logprobs=True)
        return sf.vote(found, name="vote")  # the run's answer, for the step's accuracy (a rule: not trained)

    return pocket_agents.build(n=n)


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Build (or reuse) the seed's agent, measure it, train it, measure it again."""
    from trainers.loop import LoopConfig, train_online
    from trainers.policy import Policy, PolicyConfig

    config = PocketAgentConfig(seed=seed, **({"max_steps": args.build_steps} if args.build_steps else {}))
    directory = pocket_agent(config=config, progress=False)
    task = config.task
    held_out = task.problems(args.eval, seed=0, split="test")
    policy = Policy(directory, PolicyConfig(lr=args.lr, seed=seed))
    before = evaluate_agent(policy.backend(max_new_tokens=SAMPLING["max_tokens"]), held_out, seed=EVAL_SEED)
    started = time.perf_counter()
    loop = LoopConfig(steps=args.steps, problems_per_step=args.problems, scheme="grpo", seed=seed,
                      sampling=SAMPLING)
    history = train_online(policy, agents_graph(args.agents), task.problems(2000, seed=seed + 1, split="train"),
                           loop, store=None, progress=False)
    seconds = time.perf_counter() - started
    after = evaluate_agent(policy.backend(max_new_tokens=SAMPLING["max_tokens"]), held_out, seed=EVAL_SEED)
    figures = {key: value for key, value in asdict(before).items() if key != "per_problem"}
    print(f"seed {seed}: before success {before.success:.3f} (tool use {before.tool_use:.3f}), after "
          f"{after.success:.3f} (tool use {after.tool_use:.3f}); {len(history)} steps in {seconds:.0f} s",
          flush=True)
    return {"seed": seed, "before": figures,
            "after": {key: value for key, value in asdict(after).items() if key != "per_problem"},
            "train_seconds": round(seconds, 1), "steps": len(history),
            "reward_by_step": [round(m.reward_mean or 0.0, 3) for m in history],
            "difference": [a - b for a, b in zip(after.per_problem, before.per_problem)]}


def experiment(args: argparse.Namespace) -> dict[str, Any]:
    """Every seed's run and the figures over them (``args`` as :func:`parser` reads them)."""
    if args.quick:
        args.seeds, args.steps, args.eval = args.seeds[:1], min(args.steps, 4), min(args.eval, 64)
    started = time.perf_counter()
    runs = [run_seed(seed, args) for seed in args.seeds]
    differences = [run.pop("difference") for run in runs]
    _, low, high = seeds_bootstrap_ci(differences)
    return {
        "pocket_agent_before": round(sum(r["before"]["success"] for r in runs) / len(runs), 4),
        "pocket_agent_after": round(sum(r["after"]["success"] for r in runs) / len(runs), 4),
        "pocket_agent_ci95": [round(low, 4), round(high, 4)],
        "seeds": list(args.seeds),
        "pocket_agent_runs": runs,
        "pocket_agent_protocol": {"steps": args.steps, "problems_per_step": args.problems, "agents": args.agents,
                                  "eval_problems": args.eval, "lr": args.lr},
        "pocket_agent_seconds": round(time.perf_counter() - started, 1),
    }


def add_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """This experiment's options (``prefix`` names them inside another benchmark's command line)."""
    parser.add_argument(f"--{prefix}seeds", dest="seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(f"--{prefix}steps", dest="steps", type=int, default=12)
    parser.add_argument(f"--{prefix}problems", dest="problems", type=int, default=8)
    parser.add_argument(f"--{prefix}agents", dest="agents", type=int, default=8)
    parser.add_argument(f"--{prefix}eval", dest="eval", type=int, default=200)
    parser.add_argument(f"--{prefix}lr", dest="lr", type=float, default=1e-3)
    parser.add_argument(f"--{prefix}build-steps", dest="build_steps", type=int, default=0,
                        help="the agent build's max_steps (0: the default)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="one seed, 4 steps, 64 held-out problems")
    figures = {"bench": "agent_training", **experiment(parser.parse_args(argv))}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
