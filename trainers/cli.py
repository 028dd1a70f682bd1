"""``scaffold train``: train a local model on its own graph executions (online) or on recorded runs (offline).

The command lives with the trainers and joins the ``scaffold`` command line as a plugin: the
``scaffold.cli`` entry point ``trainers = "trainers.cli:register"`` calls :func:`register`
(scaffold's own command line never imports ``trainers``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trainers.types import ROLES

if TYPE_CHECKING:
    from scaffold.cli import Registry

TOPOLOGIES = ("spiral", "spiral_rsa", "grpo", "agglm", "aggregator_only")


def _sets(context: click.Context, parameter: click.Parameter, value: str | None) -> int | str | None:
    """``--sets N|all``: a number of subsets, ``"all"`` (every one), or ``None`` when not given."""
    if value is None or value == "all":
        return value
    try:
        count = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor 'all'") from None
    if count < 1:
        raise click.BadParameter(f"needs at least 1 set, got {count}")
    return count


def _role_lr(context: click.Context, parameter: click.Parameter, values: tuple[str, ...]) -> dict[str, float]:
    """``--role-lr ROLE=MULTIPLIER``, repeatable, into ``PolicyConfig.role_lr``."""
    out: dict[str, float] = {}
    for value in values:
        role, _, number = value.partition("=")
        if role not in ROLES:
            raise click.BadParameter(f"{value!r}: the role must be one of {', '.join(ROLES)} (ROLE=MULTIPLIER)")
        try:
            out[role] = float(number)
        except ValueError:
            raise click.BadParameter(f"{value!r}: {number!r} is not a number (ROLE=MULTIPLIER)") from None
        if not out[role] >= 0:
            raise click.BadParameter(f"{value!r}: a multiplier must be >= 0 (0 freezes the role)")
    return out


@click.command("train")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A save_pretrained model directory to train (default: the pocket model, built if needed).")
@click.option("--topology", type=click.Choice(TOPOLOGIES), default="spiral", show_default=True,
              help="spiral: search + aggregation, set-RL credit; spiral_rsa: RSA rollouts, multi-level set-RL credit; "
                   "grpo: groups of samples; agglm (aggregator_only): the aggregator only (see trainers.recipes).")
@click.option("--data", metavar="NAME|PATH",
              help="Training problems: a set that ships with scaffold (math_train; `scaffold data list`), a JSONL "
                   "file with 'problem' and 'answer', or a Hugging Face dataset (default: pocket training problems).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--problems-per-step", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--lr", type=float, default=1e-5, show_default=True, help="AdamW learning rate.")
@click.option("--lora-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="LoRA rank (0: full fine-tuning).")
@click.option("--kl", "kl_coef", type=float, default=0.0, show_default=True, help="KL penalty to the start.")
@click.option("--prompts", type=click.Choice(["pocket", "generic"]),
              help="The pocket model's prompts or the topologies' own (default: pocket for the pocket model).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/train"),
              show_default=True, help="Checkpoints (resumed if present), the JSONL log and the exported model.")
@click.option("--offline", is_flag=True, help="Train on runs already in the store instead of new rollouts.")
@click.option("--graph", "graph_name", help="--offline: only runs of this graph.")
@click.option("--dataset", help="--offline: only runs of this dataset.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Roll out on a Ray cluster: --ray alone starts (or joins) a local one, --ray auto or "
                   "--ray ray://HOST:10001 joins a running one. The update runs here; weights reach the workers "
                   "after every step.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Rollout workers (with --ray), each with its own engine.")
@click.option("--engine", type=click.Choice(["transformers", "vllm"]), default="transformers", show_default=True,
              help="Each worker's engine (with --ray).")
@click.option("--max-lag", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --ray: let rollouts run this many policy versions ahead of the update (0: synchronous).")
@click.option("--sets", metavar="N|all", callback=_sets,
              help="--topology spiral: distinct subsets aggregated per problem (default 4); 'all': every one of "
                   "the C(8, 4) = 70.")
@click.option("--scale-by-std", is_flag=True,
              help="Divide each group's advantages by its reward std, as GRPO's paper does (off: Dr. GRPO's "
                   "argument, a per-problem difficulty bias that amplifies noise with binary rewards).")
@click.option("--mixed-sets-only", is_flag=True,
              help="Train an aggregation only when its candidates were neither all right nor all wrong "
                   "(GenSelect-RL).")
@click.option("--dynamic-sampling", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Up to N extra rollout rounds a step, replacing problems whose advantages are all 0 (DAPO).")
@click.option("--role-lr", "role_lr", multiple=True, metavar="ROLE=X", callback=_role_lr,
              help="A role's learning rate as a multiple of --lr, with its own AdamW state (repeatable; roles: "
                   "single, search, aggregate; 0 freezes one). Example: --role-lr aggregate=3.")
@click.pass_obj
def train(handle: Any, model_dir: Path | None, topology: str, data: str | None, steps: int, problems_per_step: int,
          lr: float, lora_rank: int, kl_coef: float, prompts: str | None, out: Path, offline: bool,
          graph_name: str | None, dataset: str | None, seed: int, ray_address: str | None, workers: int, engine: str,
          max_lag: int, sets: int | str | None, scale_by_std: bool, mixed_sets_only: bool, dynamic_sampling: int,
          role_lr: dict[str, float]) -> None:
    """Train a local model with set-RL credit assignment on its own graph executions.

    Online (the default), each step rolls the topology out with the current weights on a batch of
    training problems, records every call in the store, rewards each trace with math-verify,
    assigns credit and takes one optimiser step. ``--offline`` trains on runs already recorded
    (filtered by --graph/--dataset), rewarded against --data's answers. Checkpoints in --out
    resume an interrupted run; the trained model is exported to --out/model. With ``--ray`` the
    rollouts run on Ray workers (the same steps; at --max-lag 0 the same results).

    Training needs torch: pip install 'scaffold-sdk[train]'.

    \b
    Examples:
      scaffold train --steps 30                     # SPIRAL on the pocket model; needs scaffold-sdk[train]
      scaffold train --topology grpo --lr 3e-4 --steps 30                          # needs scaffold-sdk[train]
      scaffold train --model ./my-model --data math_train --prompts generic --lora-rank 16   # needs scaffold-sdk[train]
      scaffold train --model ./my-model --data train.jsonl --prompts generic       # needs scaffold-sdk[train]
      scaffold --store runs.db train --offline --graph spiral --data train.jsonl   # needs scaffold-sdk[train]
      scaffold train --ray --workers 2    # rollouts on a local Ray cluster; needs scaffold-sdk[train,cluster]
      scaffold train --sets all --dynamic-sampling 2 --role-lr aggregate=3   # needs scaffold-sdk[train]
    """
    from scaffold import load_problems
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, pocket_model, pocket_task
    from trainers.distributed import RolloutCluster
    from trainers.loop import LoopConfig, train_offline, train_online
    from trainers.policy import CHECKPOINT_FILE, LoraSettings, Policy, PolicyConfig
    from trainers.recipes import recipe

    if offline and ray_address is not None:
        raise click.UsageError("--ray distributes rollouts; --offline training has none")
    if sets is not None and topology != "spiral":
        raise click.UsageError(f"--sets chooses the subsets of --topology spiral; {topology} draws none")
    if dynamic_sampling and (offline or max_lag):
        raise click.UsageError("--dynamic-sampling rolls problems out again: online, with --max-lag 0")
    pocket = model_dir is None
    if model_dir is not None and not (model_dir / "config.json").is_file():
        raise click.UsageError(f"--model {model_dir} is not a save_pretrained model directory (no config.json)")
    base = model_dir if model_dir is not None else pocket_model()
    if data is not None:
        rows = load_problems(data)
    elif pocket:
        rows = pocket_task(base).problems(2000, seed=seed, split="train")
    else:
        raise click.UsageError("--data is needed to train a model other than the pocket model")
    use_pocket_prompts = (prompts or ("pocket" if pocket else "generic")) == "pocket"
    checkpoint = out / "checkpoint"
    lora = LoraSettings(rank=lora_rank, alpha=2 * lora_rank) if lora_rank else None
    config = PolicyConfig(lr=lr, lora=lora, kl_coef=kl_coef, seed=seed, role_lr=role_lr)
    if (checkpoint / CHECKPOINT_FILE).is_file():
        policy = Policy.resume(checkpoint)
        click.echo(f"resumed from {checkpoint} at step {policy.steps_done}")
    else:
        policy = Policy(base, config)
    options: dict[str, Any] = {"scale_by_std": scale_by_std, "mixed_sets_only": mixed_sets_only,
                               "dynamic_sampling": dynamic_sampling}
    if sets is not None:
        options["sets"] = None if sets == "all" else sets
    if use_pocket_prompts:
        options.update(prompt=SOLVE_PROMPT, aggregate_prompt=AGGREGATE_PROMPT)
    chosen = recipe(topology, **options)
    graph, loop_options = chosen.graph, chosen.loop_options
    loop = LoopConfig(steps=steps, problems_per_step=problems_per_step, seed=seed, log_path=str(out / "log.jsonl"),
                      checkpoint_dir=str(checkpoint), checkpoint_every=5,
                      sampling={"temperature": 1.0, "max_tokens": 128 if pocket else 1024}, **loop_options)
    if offline:
        answers = {row["problem"]: row["answer"] for row in rows}
        history = train_offline(policy, handle.open(), loop, answers=answers, graph=graph_name, dataset=dataset)
    else:
        cluster = None if ray_address is None else RolloutCluster(
            address=None if ray_address == "local" else ray_address, workers=workers, engine=engine,
            max_lag=max_lag)
        history = train_online(policy, graph, rows, loop, store=handle.target,  # created if missing; None: off
                               cluster=cluster)
    exported = policy.export(out / "model")
    last = history[-1] if history else None
    if last is not None:
        click.echo(json.dumps({"step": last.step, "reward_mean": last.reward_mean, "accuracy": last.accuracy,
                               "loss": round(last.loss, 5)}))
    click.echo(f"trained model: {exported}  (log: {out / 'log.jsonl'})")


def register(registry: Registry) -> None:
    """The ``scaffold.cli`` entry point: add ``scaffold train``."""
    registry.add_command(train)
