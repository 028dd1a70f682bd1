"""``scaffold eval``: a topology over a dataset as a named, resumable evaluation, with its report and plots."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from scaffold.cli._extras import absent, install_hint, require
from scaffold.cli._options import model_options, param_options, prepare, split_params


@click.command("eval")
@click.argument("topology", required=False)
@param_options
@model_options
@click.option("--data", default=None, metavar="NAME|PATH|hf:NAME[:SPLIT]|pocket",
              help="Problems: a set that ships with scaffold (math500, gsm8k, math_train; `scaffold data list`), "
                   "a JSONL file with problem/answer, a Hugging Face dataset (aime24, aime25, hmmt_feb25, amc23, "
                   "OWNER/NAME, or hf:NAME:SPLIT; needs hub access), or pocket problems (default).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N problems (pocket: how many; default 100).")
@click.option("--problem-key", default="problem", show_default=True, help="The problem field of the rows.")
@click.option("--answer-key", default="answer", show_default=True, help="The reference answer field of the rows.")
@click.option("--answer-kind", type=click.Choice(["math", "integer", "choice", "text", "json"]), default="math",
              show_default=True, help="How answers are read and compared (scaffold.answers): choice reads "
              "multiple-choice rows (question, options, answer) and puts the lettered options in the problem.")
@click.option("--choices-key", default="choices", show_default=True,
              help="The options field of multiple-choice rows (else columns A, B, ...).")
@click.option("--name", help="The evaluation's name (its runs are NAME-0, NAME-1...). Default: topology, dataset "
                             "and a hash of the settings, so the same command resumes the same evaluation.")
@click.option("--resume", "resume_name", metavar="NAME", help="Resume evaluation NAME with its recorded settings.")
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True, help="Problems at once.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--k", "ks", metavar="K,K,...", help="pass@k / maj@k sizes (default 1, 2, 4... up to the samples).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write report.json, problems.csv, compare.md/.csv and the plots (PNG; they need "
                   "scaffold-sdk[plot]) here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--max-cost", type=click.FloatRange(min=0, min_open=True), metavar="DOLLARS",
              help="Spend at most this much in this command (calls that could pass it are refused, not sent).")
@click.option("--max-total-tokens", type=click.IntRange(min=1), metavar="N",
              help="Spend at most N tokens (prompt + completion) in this command.")
@click.option("--dry-run", is_flag=True, help="Print the calls each evaluation would make, run nothing.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Run the problems on a Ray cluster: --ray alone starts (or joins) a local one, --ray auto or "
                   "--ray ray://HOST:10001 joins a running one. Limits and the budget hold cluster-wide.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Ray workers (with --ray); --concurrency is per worker.")
@click.option("--worker-cpus", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="CPUs Ray reserves per worker (with --ray).")
@click.pass_obj
def eval_command(handle: Any, topology: str | None, params: tuple[str, ...], prompts: str | None,
                 model_values: tuple[str, ...], api_base: str | None, price: Any, temperature: float,
                 max_tokens: int | None,
                 data: str | None, limit: int | None, problem_key: str, answer_key: str, answer_kind: str,
                 choices_key: str, name: str | None,
                 resume_name: str | None, concurrency: int, seed: int, ks: str | None, out: Path | None,
                 as_json: bool, no_progress: bool, max_cost: float | None, max_total_tokens: int | None,
                 dry_run: bool, ray_address: str | None, workers: int, worker_cpus: float) -> None:
    """Evaluate TOPOLOGY on a dataset: accuracy, pass@k, maj@k, per-step accuracy, tokens/$/latency per problem.

    TOPOLOGY is a ready-made one (`scaffold graph list`) or your own @sf.graph function as
    FILE.py:NAME or MODULE:NAME.

    Every call is recorded in the store. Kill it and run the same command again (or
    `scaffold eval --resume NAME`): finished problems are not sent again. A parameter with
    several comma-separated values (-p n=1,4,16) is a sweep: one evaluation per value, then a
    comparison table (and with --out an accuracy-against-tokens plot).

    Without --model the models default to the local pocket model, which needs
    pip install 'scaffold-sdk[train]'; without --data the problems are pocket problems.

    \b
    Examples:
      scaffold eval rsa --data math500 --model openai/gpt-4o-mini -p n=16   # a set shipped with scaffold
      scaffold eval rsa --data aime24 --model openai/gpt-4o-mini -p n=16    # from the hub; needs scaffold-sdk[hub]
      scaffold eval self_consistency --model openai/gpt-4o-mini -p n=1,4,16 --out out/sc   # a sweep and its table
      scaffold eval my_graphs.py:debate --model openai/gpt-4o-mini -p rounds=2   # your own @sf.graph function
      scaffold eval agglm --model solver=openai/gpt-4o-mini --model aggregator=hosted_vllm/agg \\
          --api-base http://127.0.0.1:8000/v1 --data math500 --limit 100
      scaffold eval rsa --model openai/gpt-4o-mini --data problems.jsonl --dry-run   # calls, before paying
      scaffold eval rsa --model openai/gpt-4o-mini --data gsm8k --max-cost 5
      scaffold eval self_consistency --data mmlu.csv --answer-kind choice --model openai/gpt-4o-mini -p n=5
      scaffold eval --resume rsa-math500-1a2b3c
      scaffold --store postgresql+psycopg://user@db/scaffold eval rsa --model openai/gpt-4o-mini --data math500 \\
          --ray auto --workers 8                        # on a Ray cluster; needs scaffold-sdk[cluster,postgres]
      scaffold eval rsa -p n=8 -p steps=3         # pocket model, 100 pocket problems; needs scaffold-sdk[train]
      scaffold compare rsa-math500-1a2b3c self_consistency-math500-4d5e6f
    """
    from scaffold.evaluation import load_report
    from scaffold.store._default import resolve_store

    if ray_address is not None and not dry_run:
        require("ray", "--ray")
    store = resolve_store(handle.target)
    if store is None:
        raise click.UsageError("an evaluation is recorded in a store; $SCAFFOLD_STORE turns it off: pass --store")
    ask = Ask(topology, params, model_values, prompts, api_base, temperature, max_tokens, data, limit, problem_key,
              answer_key, seed, answer_kind, choices_key,
              None if price is None else (price.input * 1e6, price.output * 1e6))
    if resume_name is not None:
        ask, name = ask.resumed(store.evaluation(resume_name).settings, resume_name), resume_name
    if ask.data in (None, "pocket") and ask.answer_kind not in ("math", "integer"):  # before any model is built
        raise click.UsageError(f"--answer-kind {ask.answer_kind} needs --data: pocket problems have integer answers")
    sizes = _ks(ks)
    budget = None
    if max_cost is not None or max_total_tokens is not None:
        import scaffold as sf

        budget = sf.Budget(max_tokens=max_total_tokens, max_cost=max_cost)
    reports = []
    for plan in plans(ask, name):
        if dry_run:
            calls = plan.graph.count_calls()
            click.echo(f"{plan.name}: {len(plan.rows)} problems x ({', '.join(f'{a}={n}' for a, n in calls.items())})"
                       f" = {len(plan.rows) * sum(calls.values()):,} model calls")
            continue
        plan.run(store, concurrency=concurrency, seed=ask.seed, progress=not no_progress, budget=budget,
                 **_cluster_option(ray_address, workers, worker_cpus))
        reports.append(load_report(store, plan.name, ks=sizes))
    if dry_run:
        return
    if budget is not None and budget.refused:
        click.echo(f"the budget refused {budget.refused} call(s) (spent {budget.tokens:,} tokens, "
                   f"${budget.cost:.4f}); their problems count as wrong until resumed", err=True)
    _print(reports, as_json)
    if out is not None:
        for path in write_outputs(reports, out):
            click.echo(f"wrote {path}", err=True)
    incomplete = [r.name for r in reports if not r.complete]
    if incomplete:
        click.echo(f"not every problem finished ({', '.join(incomplete)}); failed runs count as wrong. "
                   f"Resume with: scaffold eval --resume {incomplete[0]}", err=True)
        raise SystemExit(1)


@dataclass(frozen=True)
class Ask:
    """What one ``scaffold eval`` command asks for (before sweeps are expanded)."""

    topology: str | None
    params: tuple[str, ...]
    model_values: tuple[str, ...]
    prompts: str | None
    api_base: str | None
    temperature: float
    max_tokens: int | None
    data: str | None
    limit: int | None
    problem_key: str
    answer_key: str
    seed: int
    answer_kind: str = "math"
    choices_key: str = "choices"
    price: tuple[float, float] | None = None
    """Dollars per million prompt and completion tokens (``--price``)."""

    def resumed(self, recorded: Mapping[str, Any], name: str) -> Ask:
        """The same request as the recorded evaluation ``name`` (a topology given too must be its own)."""
        if self.topology is not None and self.topology != recorded.get("topology"):
            raise click.UsageError(f"--resume {name} is a {recorded.get('topology')} evaluation, not {self.topology}")
        return Ask(
            topology=recorded["topology"], params=tuple(f"{k}={v}" for k, v in recorded.get("params", {}).items()),
            model_values=tuple(f"{k}={v}" for k, v in recorded.get("models", {}).items()),
            prompts=recorded.get("prompts"), api_base=recorded.get("api_base") or self.api_base,
            temperature=recorded.get("temperature", self.temperature), max_tokens=recorded.get("max_tokens"),
            data=recorded.get("data"), limit=recorded.get("limit"), problem_key=recorded.get("problem_key", "problem"),
            answer_key=recorded.get("answer_key", "answer"), seed=recorded.get("seed", self.seed),
            answer_kind=recorded.get("answer_kind", "math"), choices_key=recorded.get("choices_key", "choices"),
            price=tuple(recorded["price"]) if recorded.get("price") else self.price,  # type: ignore[arg-type]
        )


@dataclass
class Plan:
    """One evaluation about to run: its name, graph, models, rows and the settings recorded with it."""

    name: str
    graph: Any
    bound: Any
    rows: list[dict[str, Any]]
    dataset: str
    source: str
    settings: dict[str, Any]

    def run(self, store: Any, **options: Any) -> None:
        from scaffold.evaluation import evaluate

        specs = ", ".join(f"{a}={s}" for a, s in self.bound.specs.items())
        click.echo(f"evaluation {self.name}: {self.graph.name} on {len(self.rows)} problems of {self.dataset} "
                   f"({specs})", err=True)
        try:
            evaluate(self.graph, self.rows, self.bound.models, name=self.name, store=store, dataset=self.dataset,
                     source=self.source, settings=self.settings, answer_kind=self.settings.get("answer_kind"),
                     **options)
        except KeyboardInterrupt:
            store.flush()
            click.echo(f"\ninterrupted: what finished is recorded; resume with: scaffold eval --resume {self.name}",
                       err=True)
            raise SystemExit(130) from None


def plans(ask: Ask, name: str | None) -> list[Plan]:
    """One plan per combination of swept parameters, each with its models bound and its rows loaded."""
    if ask.topology is None:
        raise click.UsageError("name a topology (scaffold graph list shows them) or --resume NAME")
    combos = sweep(ask.topology, split_params(ask.params))
    names: list[str | None] = [name] * len(combos)
    if name is not None and len(combos) > 1:
        names = [f"{name}.{_suffix(combo, combos)}" for combo in combos]
    made = []
    # problems from a file or the hub are loaded first: a bad --data fails before any model is built or loaded
    given_rows = None
    if ask.data not in (None, "pocket"):
        given_rows = load_rows(ask.data, ask.limit, ask.seed, None, ask.problem_key, ask.answer_key,
                               ask.answer_kind, ask.choices_key)
    for combo, given in zip(combos, names):
        graph, bound = prepare(ask.topology, combo, ask.model_values, api_base=ask.api_base, prompts=ask.prompts,
                               temperature=ask.temperature, max_tokens=ask.max_tokens, price=_price_of(ask))
        if given_rows is not None:
            rows, dataset, source = list(given_rows[0]), given_rows[1], given_rows[2]
        else:
            rows, dataset, source = load_rows(ask.data, ask.limit, ask.seed, bound.pocket_dir, ask.problem_key,
                                              ask.answer_key, ask.answer_kind, ask.choices_key)
        settings = {
            "topology": ask.topology, "params": combo, "models": bound.specs, "api_base": _safe(ask.api_base),
            "prompts": ask.prompts or ("pocket" if bound.pocket else "generic"), "temperature": ask.temperature,
            "max_tokens": bound.params.get("max_tokens"), "data": ask.data, "limit": ask.limit, "seed": ask.seed,
            "problem_key": ask.problem_key, "answer_key": ask.answer_key,
        }
        if ask.answer_kind != "math":  # recorded only when chosen: evaluations from before kinds resume as they were
            settings.update(answer_kind=ask.answer_kind, choices_key=ask.choices_key)
        if ask.price is not None:
            settings["price"] = list(ask.price)
        made.append(Plan(given or default_name(graph.name, dataset, settings), graph, bound, rows, dataset, source,
                         settings))
    return made


def _price_of(ask: Ask) -> Any:
    if ask.price is None:
        return None
    from scaffold.backends import Price

    return Price(input=ask.price[0] / 1e6, output=ask.price[1] / 1e6)


def _print(reports: Sequence[Any], as_json: bool) -> None:
    from scaffold.evaluation import comparison_rows, to_text

    if as_json:
        click.echo(json.dumps([r.summary() for r in reports] if len(reports) > 1 else reports[0].summary(),
                              indent=2))
        return
    for report in reports:
        click.echo(render(report))
        click.echo()
    if len(reports) > 1:
        click.echo(to_text(comparison_rows(reports)))


# -- settings ----------------------------------------------------------------------------------
def sweep(topology: str, params: Mapping[str, str]) -> list[dict[str, str]]:
    """One parameter set per combination of comma-separated values (tuple parameters keep their commas)."""
    from scaffold._errors import GraphError
    from scaffold.catalogue import topologies

    catalogue = topologies()
    try:
        defaults = catalogue.topology(topology).defaults
    except GraphError as exc:
        raise click.UsageError(str(exc)) from None
    choices = []
    for key, text in params.items():
        values = [text] if isinstance(defaults.get(key), tuple) else [v.strip() for v in text.split(",") if v.strip()]
        choices.append([(key, value) for value in values or [text]])
    return [dict(combo) for combo in itertools.product(*choices)] if choices else [{}]


def _suffix(combo: Mapping[str, str], combos: Sequence[Mapping[str, str]]) -> str:
    varying = [k for k in combo if len({c[k] for c in combos}) > 1]
    return ".".join(f"{k}={combo[k]}" for k in varying)


def default_name(topology: str, dataset: str, settings: Mapping[str, Any]) -> str:
    """``{topology}-{dataset}-{6 hex of the settings}``: the same command always names the same evaluation."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return f"{topology}-{dataset}-{digest}"


def _safe(url: str | None) -> str | None:
    from scaffold.cli._common import redact

    return None if url is None else redact(url, url)


def _ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of integers", param_hint="--k") from None
    if not sizes or sizes[0] < 1:
        raise click.BadParameter("k must be positive integers, e.g. 1,2,4,8", param_hint="--k")
    return sizes


def load_rows(data: str | None, limit: int | None, seed: int, pocket_dir: Path | None, problem_key: str,
              answer_key: str, answer_kind: str = "math", choices_key: str = "choices"
              ) -> tuple[list[dict[str, Any]], str, str]:
    """The problems ``--data`` names, the dataset name they are recorded under, and their source."""
    from scaffold._data import DATASETS, load_problems
    from scaffold._rows import load_hub_problems
    from scaffold.pocket import PocketTask, pocket_task

    if data is None or data == "pocket":
        task = pocket_task(pocket_dir) if pocket_dir is not None else PocketTask()
        count = limit or 100
        rows = task.problems(count, seed=seed, split="test")
        return rows, f"pocket-{task.digits}x{task.terms}-test-s{seed}-n{count}", f"pocket:{task.name}"
    kind = {"answer_kind": answer_kind, "choices_key": choices_key} if answer_kind == "choice" else {}
    if data.startswith("hf:"):
        hub, _, split = data[3:].partition(":")
        if kind:
            rows = load_problems(hub, split=split or "test", limit=limit, problem_key=problem_key,
                                 answer_key=answer_key, **kind)
        else:
            rows = load_hub_problems(hub, split=split or "test", limit=limit, problem_key=problem_key,
                                     answer_key=answer_key)
        return rows, f"{hub.replace('/', '_')}-{split or 'test'}", data
    rows = load_problems(data, limit=limit, problem_key=problem_key, answer_key=answer_key, **kind)
    path = Path(data).expanduser()
    source = str(path) if data not in DATASETS and path.exists() else data  # a shipped name wins over a path
    return rows, path.stem + (f"-n{limit}" if limit else ""), source


# -- output ------------------------------------------------------------------------------------
def render(report: Any) -> str:
    """The text report of one evaluation."""
    lines = [f"{report.name}  ({report.graph} on {report.dataset}: {report.finished}/{report.problems} problems"
             + (f", {report.failed} failed" if report.failed else "") + ")"]
    cost = "?" if report.cost is None else f"${report.cost.value:.4f}"
    latency = "-" if report.latency is None else f"{report.latency.value:.2f}s"
    lines.append(f"  accuracy          {report.accuracy}")
    lines.append(f"  per problem       {report.tokens.value:,.0f} tokens  {cost}  {latency}  "
                 f"{report.calls:.1f} calls")
    if report.pass_at_k:
        lines.append(f"  samples node      {report.samples_node}")
        for k in report.pass_at_k:
            lines.append(f"  pass@{k:<4} {report.pass_at_k[k]}   maj@{k:<4} {report.majority_at_k[k]}")
    if len(report.node_accuracy) > 1:
        lines.append("  accuracy by node  " + "  ".join(f"{node} {acc:.3f}" for node, acc in
                                                          report.node_accuracy.items()))
    if any(b.problems for b in report.gain):
        lines.append("  aggregation vs majority of its candidates (AggLM Fig. 4), by majority share:")
        for b in report.gain:
            if b.problems:
                lines.append(f"    ({b.low:.2f}, {b.high:.2f}]  calls {b.problems:>5}  majority "
                             f"{b.majority_accuracy:.3f}  aggregator {b.aggregator_accuracy:.3f}  "
                             f"gain {b.gain:+.3f}")
    return "\n".join(lines)


def write_outputs(reports: Sequence[Any], out: Path, replays: Sequence[Any] = ()) -> list[Path]:
    """``report.json``, ``problems.csv``, the comparison table (Markdown and CSV) and the plots, in ``out``
    (``replays``: their curves join the budget plots, and ``replay.json`` holds them)."""
    import csv

    from scaffold.evaluation import comparison_rows, to_csv, to_markdown
    from scaffold.evaluation._plots import write_plots

    out.mkdir(parents=True, exist_ok=True)
    written = []
    summary = out / "report.json"
    summary.write_text(json.dumps([r.summary() for r in reports], indent=2) + "\n")
    problems = out / "problems.csv"
    with problems.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["evaluation", "item", "run_id", "status", "correct", "answer", "reference", "tokens",
                         "cost", "latency", "calls"])
        for report in reports:
            for o in report.outcomes:
                writer.writerow([report.name, o.item, o.run_id, o.status, "" if o.correct is None else int(o.correct),
                                 o.answer, o.reference, o.tokens, "" if o.cost is None else o.cost,
                                 "" if o.latency is None else round(o.latency, 3), o.calls])
    rows = comparison_rows(reports)
    (out / "compare.md").write_text(to_markdown(rows) + "\n")
    (out / "compare.csv").write_text(to_csv(rows))
    written += [summary, problems, out / "compare.md", out / "compare.csv"]
    if replays:
        (out / "replay.json").write_text(json.dumps([r.summary() for r in replays], indent=2) + "\n")
        written.append(out / "replay.json")
    if absent(["matplotlib"]):  # the tables are written; the evaluation is not lost for want of a plot
        click.echo(f"no plots: they need matplotlib ({install_hint('matplotlib')})", err=True)
    else:
        written += write_plots(reports, out, replays=replays)
    return written


def _cluster_option(address: str | None, workers: int, cpus: float) -> dict[str, Any]:
    """``cluster=`` for ``evaluate`` when ``--ray`` was given (``local``: start or join a local cluster)."""
    if address is None:
        return {}
    from scaffold.cluster import Cluster

    return {"cluster": Cluster(address=None if address == "local" else address, workers=workers, num_cpus=cpus)}
