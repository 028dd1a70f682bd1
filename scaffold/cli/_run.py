"""``scaffold run``: run one topology once on one problem and report its answer, calls, tokens and cost.

Every mistake in the command line (topology, parameter, model, alias, missing API key) is a
one-line usage error before any call. The run records into the store (``--store``,
``$SCAFFOLD_STORE`` or ``./scaffold.db``) unless the store is off; a run that fails still
prints what it spent and exits with status 1.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from scaffold.cli._common import StoreHandle, fmt_cost, fmt_duration
from scaffold.cli._options import model_options, param_options, prepare, split_params


def redact_secrets(message: str) -> str:
    """``message`` without API keys: the values of secret-named environment variables and key-shaped strings.

    A provider's error may quote the key it was sent; the CLI never prints one.
    """
    from scaffold._secrets import environment_secrets, redact

    return redact(message, environment_secrets())


def _problem_text(value: str) -> str:
    text = sys.stdin.read() if value == "-" else value
    if not text.strip():
        raise click.BadParameter("the problem is empty", param_hint="--problem")
    return text.strip()


@click.command("run")
@click.argument("topology")
@click.option("--problem", required=True, metavar="TEXT", help="The problem to solve; '-' reads it from stdin.")
@click.option("--answer", "reference", metavar="REF", help="The reference answer: report whether the run's matches.")
@click.option("--answer-kind", type=click.Choice(["math", "integer", "choice", "text", "json"]), default=None,
              help="How the answer is read and compared (scaffold.answers; default math, or choice with --choice).")
@click.option("--choice", "choices", multiple=True, metavar="TEXT",
              help="An option of a multiple-choice problem (repeat it: A, B, ...); the problem gets them lettered.")
@param_options
@model_options
@click.option("--seed", type=int, help="Fixes every random choice of the run (default: drawn, and printed).")
@click.option("--run-id", metavar="ID", help="The run's id (default: a new one); a recorded id resumes that run.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the report.")
@click.pass_obj
def run_command(handle: StoreHandle, topology: str, problem: str, reference: str | None, answer_kind: str | None,
                choices: tuple[str, ...], params: tuple[str, ...], prompts: str | None, model_values: tuple[str, ...],
                api_base: str | None, price: Any, temperature: float, max_tokens: int | None, seed: int | None,
                run_id: str | None, as_json: bool) -> None:
    """Run TOPOLOGY once on one problem; print the answer, model calls, tokens, cost and wall time.

    TOPOLOGY is a ready-made one or your own @sf.graph function as FILE.py:NAME or MODULE:NAME.
    --model binds every alias (SPEC) or one (ALIAS=SPEC), e.g. --model openai/gpt-4o-mini with
    $OPENAI_API_KEY set. Without it the models default to the local pocket model (built on first
    use, with its prompts), which needs torch: pip install 'scaffold-sdk[train]'. `scaffold graph
    list` names the topologies and `scaffold graph show TOPOLOGY` draws one. The run is recorded
    in the store: `scaffold runs show ID` shows it call by call.

    \b
    Examples:
      scaffold run self_consistency --model solver=openai/gpt-4o-mini -p n=8 --problem "12+7+30" --answer 49
      scaffold run rsa -p n=8 -p steps=3 --problem "What is 17*23?" --model openai/gpt-4o-mini
      cat problem.txt | scaffold run best_of_n --model openai/gpt-4o-mini --model judge=openai/gpt-4o --problem -
      scaffold run single_sample --model hosted_vllm/qwen --api-base http://localhost:8000/v1 --problem "2+2"
      scaffold --store runs.db run self_consistency --model openai/gpt-4o-mini --problem "1+2+3" --seed 0 --json
      scaffold run self_consistency -p n=8 --problem "12+7+30" --answer 49   # pocket model; needs scaffold-sdk[train]
      scaffold run self_consistency --model openai/gpt-4o-mini --problem "Capital of France?" --choice Rome \
          --choice Paris --answer B
    """
    from scaffold.answers import answer_kind as answer_kind_of
    from scaffold.answers import format_choices

    text = _problem_text(problem)
    if len(choices) == 1 or len(choices) > 10:
        raise click.BadParameter(f"a multiple-choice problem has 2 to 10 options, got {len(choices)}",
                                 param_hint="--choice")
    if choices and answer_kind not in (None, "choice"):
        raise click.BadParameter(f"--choice makes a multiple-choice problem; --answer-kind {answer_kind} does not "
                                 f"read one", param_hint="--answer-kind")
    inputs: dict[str, Any] = {"problem": text}
    if choices:
        inputs = {"problem": format_choices(text, choices), "choices": list(choices)}
    kind = answer_kind_of(answer_kind or ("choice" if choices else "math")).bind(inputs)
    graph, bound = prepare(topology, split_params(params), model_values, api_base=api_base, prompts=prompts,
                           temperature=temperature, max_tokens=max_tokens, price=price)
    from scaffold.store import close_stores

    try:
        result = graph.run_sync(inputs, models=bound.models, seed=seed, run_id=run_id, store=handle.target,
                                raise_on_error=False, answer_kind=kind)
    finally:
        close_stores()
    report = _report(result, reference, bound.specs, handle, kind.correct)
    error = redact_secrets(report["error"]) if report["error"] else None
    report["error"] = error
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        click.echo(_text(report, handle))
    if error is not None:
        if as_json:
            raise SystemExit(1)
        raise click.ClickException(f"run {result.run_id} failed: {error}")


def _report(result: Any, reference: str | None, specs: dict[str, str], handle: StoreHandle,
            correct: Any) -> dict[str, Any]:
    usage = result.usage
    error = None
    if result.error is not None:
        line = (str(result.error).strip().splitlines() or [""])[0]
        error = f"{type(result.error).__name__}: {line}" if line else type(result.error).__name__
    elif not result.ok:
        error = f"the run ended with status {result.status}"
    return {
        "run_id": result.run_id, "graph": result.graph, "status": result.status, "answer": result.answer,
        "reference": reference, "correct": None if reference is None else correct(result.answer, reference),
        "calls": dict(sorted(result.calls_by_model().items())), "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens, "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "cost": result.cost, "wall_time": result.wall_time, "seed": result.seed, "models": specs,
        "store": handle.redact(handle.target) if handle.target is not None else None, "error": error,
    }


def _text(report: dict[str, Any], handle: StoreHandle) -> str:
    answer = report["answer"] if report["answer"] is not None else "-"
    if report["correct"] is not None:
        answer += f"   ({'right' if report['correct'] else 'wrong'}: reference {report['reference']})"
    run_id = report["run_id"]
    if report["store"] is None:
        recorded = "(not recorded: $SCAFFOLD_STORE turns the store off)"
    else:
        store = f"--store {report['store']} " if handle.origin == "--store" else ""
        recorded = f"(scaffold {store}runs show {run_id})"
    fields = [
        ("answer", answer),
        ("status", report["status"]),
        ("calls", ", ".join(f"{alias}={n}" for alias, n in report["calls"].items()) or "0"),
        ("tokens", f"{report['total_tokens']:,} ({report['prompt_tokens']:,} prompt + "
                   f"{report['completion_tokens']:,} completion)"),
        ("cost", fmt_cost(report["cost"])),
        ("wall", fmt_duration(report["wall_time"])),
        ("seed", str(report["seed"])),
        ("models", ", ".join(f"{alias}: {spec}" for alias, spec in report["models"].items())),
        ("run", f"{run_id}   {recorded}"),
    ]
    return "\n".join(f"{name:<8}{value}" for name, value in fields)
