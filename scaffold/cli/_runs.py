"""``scaffold runs``: list, show and export the runs recorded in a store."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import click

from scaffold._messages import message_dict
from scaffold.cli._common import StoreHandle, TimeType, fmt_cost, fmt_duration, fmt_time, shorten, table

if TYPE_CHECKING:
    from scaffold._types import Trace
    from scaffold.store._query import RunInfo, Totals
    from scaffold.store._store import Store

F = TypeVar("F", bound=Callable[..., Any])

STATUSES = ("running", "ok", "error", "timeout", "cancelled")


def _store() -> Store:
    handle = click.get_current_context().find_object(StoreHandle)
    assert handle is not None, "the scaffold group sets the store handle"
    return handle.open()


def run_filters(command: F) -> F:
    """The filters every listing command takes (those of :func:`scaffold.store._query.filter_runs`)."""
    options = [
        click.option("--graph", help="Only runs of this graph."),
        click.option("--dataset", help="Only runs of rows of this dataset."),
        click.option("--model", help="Only runs with a call to this model (an alias or a concrete model name)."),
        click.option("--status", type=click.Choice(STATUSES), help="Only runs that ended so (or still run)."),
        click.option("--since", type=TimeType(), help="Only runs started at or after TIME (2024-05-01, 2h, 7d...)."),
        click.option("--until", type=TimeType(), help="Only runs started before TIME."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _filters(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def resolve_run(store: Store, ref: str) -> str:
    """The id of the run ``ref`` names: its full id, or a prefix of exactly one run's id (like git)."""
    from sqlalchemy import select

    from scaffold.store._schema import RUNS

    ids = RUNS.c.id
    with store.engine.connect() as conn:
        if conn.execute(select(ids).where(ids == ref)).first() is not None:
            return ref
        found = [i for i in conn.execute(select(ids).where(ids.startswith(ref, autoescape=True))
                                         .order_by(ids).limit(50)).scalars() if i.startswith(ref)]
    if not found:
        raise click.ClickException(f"no run {ref!r} in {store} (scaffold runs list shows the recorded runs)")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise click.ClickException(f"run prefix {ref!r} is ambiguous: it matches {shown}; give more characters")
    return found[0]


@click.group()
def runs() -> None:
    """Browse and export recorded runs.

    \b
    Examples:
      scaffold runs list --graph rsa --since 2h
      scaffold runs show 3f2a9c
      scaffold runs export --out calls.parquet --dataset aime24 --status ok   # needs scaffold-sdk[parquet]
      scaffold runs import outputs.jsonl --name elsewhere     # outputs collected elsewhere, as runs
    """


# -- list -------------------------------------------------------------------------------------
@runs.command("list")
@run_filters
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="Most runs to show.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of run summaries instead of a table.")
def list_command(limit: int, as_json: bool, **filter_values: Any) -> None:
    """List recorded runs, newest first.

    Columns: id, graph, status, model calls, tokens (prompt + completion), cost ("?" when a
    price is unknown), wall time, answer and start time. TIME is an ISO date or time
    (2024-05-01, 2024-05-01T14:30, local unless it has an offset) or a time ago (45s, 30m, 2h, 7d).

    \b
    Examples:
      scaffold runs list
      scaffold runs list --graph rsa --status ok --since 7d -n 100
      scaffold runs list --model gpt-4o-mini --since 2024-05-01 --until 2024-05-02 --json
    """
    store = _store()
    found = store.runs(limit=limit, **_filters(**filter_values))
    totals = {info.id: _run_totals(store, info) for info in found}
    if as_json:
        click.echo(json.dumps([_run_json(info, totals[info.id]) for info in found], indent=2, default=str))
        return
    if not found:
        click.echo("no runs match" if _filters(**filter_values) else f"no runs in {store}")
        return
    rows = []
    for info in found:
        calls, tokens, cost = totals[info.id]
        rows.append([info.id, info.graph, info.status, str(calls), f"{tokens:,}", fmt_cost(cost),
                     fmt_duration(info.wall_time), shorten(info.answer, 24), fmt_time(info.started_at)])
    click.echo(table(["ID", "GRAPH", "STATUS", "CALLS", "TOKENS", "COST", "WALL", "ANSWER", "STARTED"], rows,
                     right=(3, 4, 5, 6)))


def _run_totals(store: Store, info: RunInfo) -> tuple[int, int, float | None]:
    """Model calls, tokens and cost: the run's own summary once it ended, summed from its calls while it runs."""
    if info.status != "running":
        return info.calls, info.prompt_tokens + info.completion_tokens, info.cost
    live = _sum(store.rollup("run", run_id=info.id).values())
    return live.calls, live.total_tokens, live.cost


def _run_json(info: RunInfo, totals: tuple[int, int, float | None] | None = None) -> dict[str, Any]:
    data = asdict(info)
    data["wall_time"] = info.wall_time
    if totals is not None:
        data["calls"], data["total_tokens"], data["cost"] = totals
    return data


# -- show -------------------------------------------------------------------------------------
@runs.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the run, its traces and rollups as JSON.")
@click.option("--full", is_flag=True, help="Do not truncate texts; also print each call's messages "
                                           "(with --json: messages, token ids and logprobs).")
def show_command(run: str, as_json: bool, full: bool) -> None:
    """Show one run as its execution tree.

    RUN is a run id or a prefix of exactly one (like git). The header has the graph, status,
    seed, build parameters, inputs, models and totals; then each node in execution order
    with its traces (tokens, cost, latency, answer, reward, status, and which traces each
    one read), then tokens, cost and latency per node and per model.

    \b
    Examples:
      scaffold runs show 3f2a9c
      scaffold runs show 3f2a9c --full | less
      scaffold runs show 3f2a9c --json | jq '.traces[] | select(.status != "ok")'
    """
    store = _store()
    run_id = resolve_run(store, run)
    info = store.run(run_id)
    traces = store.traces(run_id)
    rewards = store.rewards(run_id)
    by_node = _in_order(store.rollup("node", run_id=run_id), traces)
    by_model = store.rollup("model", run_id=run_id)
    call_reward: dict[str, float] = {}
    run_reward: float | None = None
    for reward in rewards:
        if reward["call_id"] is None:
            run_reward = (run_reward or 0.0) + reward["value"]
        else:
            call_reward[reward["call_id"]] = call_reward.get(reward["call_id"], 0.0) + reward["value"]
    if as_json:
        data = {
            "run": _run_json(info), "run_reward": run_reward,
            "totals": _totals_json(_sum(by_model.values())),
            "traces": [_trace_json(t, call_reward.get(t.id), full) for t in traces],
            "rewards": rewards,
            "rollups": {"node": _rollup_json(by_node), "model": _rollup_json(by_model)},
        }
        click.echo(json.dumps(data, indent=2, default=str))
        return
    click.echo(_header(info, _sum(by_model.values()), run_reward, full))
    for node, members in _by_node(traces):
        click.echo("")
        click.echo(_node_title(node, members))
        for trace in members:
            click.echo(_trace_text(trace, call_reward.get(trace.id), full))
    for title, rollup in (("node", by_node), ("model", by_model)):
        if rollup:
            click.echo(f"\nper {title}")
            click.echo(_rollup_table(title, rollup))


def _header(info: RunInfo, totals: Totals, run_reward: float | None, full: bool) -> str:
    width = 10_000 if full else 100
    lines = [f"run {info.id}   graph {info.graph}   status {info.status}"]
    summary = (f"{totals.calls} model call{'s' if totals.calls != 1 else ''}, {totals.total_tokens:,} tokens "
               f"({totals.prompt_tokens:,} prompt + {totals.completion_tokens:,} completion), "
               f"cost {fmt_cost(totals.cost)}, latency {fmt_duration(totals.latency)} summed")
    if totals.errors:
        summary += f", {totals.errors} failed"
    fields: list[tuple[str, str]] = [
        ("started", f"{fmt_time(info.started_at)}   wall {fmt_duration(info.wall_time)}   attempts {info.attempts}"),
        ("seed", str(info.seed)),
        ("params", shorten(_pairs(info.params), width) or "-"),
        ("inputs", shorten(_pairs(info.inputs), width) or "-"),
        ("models", ", ".join(f"{alias}: {spec.get('model') or '?'} ({spec.get('backend') or '?'})"
                             for alias, spec in info.models.items()) or "-"),
        ("totals", summary),
        ("answer", shorten(info.answer, width)),
    ]
    if info.dataset is not None:
        fields.append(("dataset", f"{info.dataset} row {info.item}"))
    if run_reward is not None:
        fields.append(("reward", f"{run_reward:g}"))
    if info.error:
        fields.append(("error", shorten(info.error, width)))
    lines += [f"  {name:<8}{value}" for name, value in fields]
    return "\n".join(lines)


def _in_order(rollup: dict[str | None, Totals], traces: Sequence[Trace]) -> dict[str | None, Totals]:
    """A per-node rollup with nodes in execution order (loop iterations ``node@i`` count as ``node``)."""
    first: dict[str, int] = {}
    for position, trace in enumerate(traces):
        first.setdefault(trace.node.split("@", 1)[0], position)
    return dict(sorted(rollup.items(), key=lambda item: first.get(item[0] or "", len(first))))


def _pairs(values: Mapping[Any, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _by_node(traces: Sequence[Trace]) -> list[tuple[str, list[Trace]]]:
    """Traces grouped by node, nodes in the order they started, traces by index."""
    groups: dict[str, list[Trace]] = {}
    for trace in traces:
        groups.setdefault(trace.node, []).append(trace)
    return [(node, sorted(members, key=lambda t: t.index)) for node, members in groups.items()]


def _node_title(node: str, members: Sequence[Trace]) -> str:
    kinds = sorted({t.kind.value for t in members})
    aliases = sorted({t.model for t in members if t.model})
    what = ", ".join(kinds) + (f" {', '.join(aliases)}" if aliases else "")
    failed = sum(1 for t in members if not t.ok)
    count = f"{len(members)} trace{'s' if len(members) != 1 else ''}" + (f", {failed} failed" if failed else "")
    return f"{node}   ({what}; {count})"


def _short_id(trace_id: str, run_id: str) -> str:
    prefix = f"{run_id}/"
    return trace_id[len(prefix):] if trace_id.startswith(prefix) else trace_id


def _trace_text(trace: Trace, reward: float | None, full: bool) -> str:
    parts = [f"  #{trace.index:<3}", f"{trace.status.value:<9}"]
    if trace.kind.value == "model":
        parts.append(f"tokens {trace.usage.prompt_tokens}+{trace.usage.completion_tokens}")
        parts.append(f"cost {fmt_cost(trace.cost)}")
        parts.append(f"latency {fmt_duration(trace.latency)}")
        if trace.attempt > 1:
            parts.append(f"attempts {trace.attempt}")
    parts.append(f"answer {shorten(trace.answer, 10_000 if full else 30)}")
    if reward is not None:
        parts.append(f"reward {reward:g}")
    if trace.inputs:
        parts.append("reads " + ", ".join(_short_id(i, trace.run_id) for i in trace.inputs))
    lines = ["  ".join(parts)]
    pad = " " * 8
    if full:
        if trace.request is not None:
            for message in trace.request.messages:
                role, content = message[0], message[1]
                lines.append(f"{pad}[{role}]")
                lines += [pad + "  " + line for line in str(content).splitlines()]
            if trace.request.prompt is not None:
                lines.append(f"{pad}[prompt]")
                lines += [pad + "  " + line for line in trace.request.prompt.splitlines()]
        if trace.text:
            lines.append(f"{pad}[output]")
            lines += [pad + "  " + line for line in trace.text.splitlines()]
    elif trace.text:
        lines.append(pad + shorten(trace.text, 100))
    if trace.error:
        lines.append(pad + "error: " + (trace.error if full else shorten(trace.error, 100)))
    return "\n".join(lines)


def _trace_json(trace: Trace, reward: float | None, full: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": trace.id, "node": trace.node, "index": trace.index, "kind": trace.kind.value, "alias": trace.model,
        "model": trace.request.model if trace.request is not None else None, "status": trace.status.value,
        "prompt_tokens": trace.usage.prompt_tokens, "completion_tokens": trace.usage.completion_tokens,
        "cost": trace.cost, "latency": trace.latency, "started_at": trace.started_at, "attempts": trace.attempt,
        "answer": trace.answer, "text": trace.text, "reward": reward, "inputs": list(trace.inputs),
        "error": trace.error, "metadata": dict(trace.metadata),
    }
    if full:
        request = trace.request
        data["messages"] = [message_dict(m) for m in request.messages] if request is not None else []
        data["prompt"] = request.prompt if request is not None else None
        data["params"] = dict(request.params) if request is not None else {}
        data["token_ids"] = None if trace.token_ids is None else list(trace.token_ids)
        data["logprobs"] = None if trace.logprobs is None else list(trace.logprobs)
    return data


def _rollup_table(title: str, rollup: Mapping[str | None, Totals]) -> str:
    rows = [[key if key is not None else "?", str(t.calls), f"{t.prompt_tokens:,}", f"{t.completion_tokens:,}",
             fmt_cost(t.cost), fmt_duration(t.latency), str(t.errors)] for key, t in rollup.items()]
    return table([title.upper(), "CALLS", "PROMPT", "COMPLETION", "COST", "LATENCY", "FAILED"], rows,
                 right=(1, 2, 3, 4, 5, 6), indent="  ")


def _totals_json(totals: Totals) -> dict[str, Any]:
    return {"calls": totals.calls, "prompt_tokens": totals.prompt_tokens,
            "completion_tokens": totals.completion_tokens, "total_tokens": totals.total_tokens,
            "cost": totals.cost, "latency": totals.latency, "errors": totals.errors}


def _rollup_json(rollup: Mapping[str | None, Totals]) -> list[dict[str, Any]]:
    return [{"key": key, **_totals_json(totals)} for key, totals in rollup.items()]


def _sum(values: Any) -> Totals:
    from scaffold.store._query import Totals

    calls = prompt = completion = errors = 0
    latency = 0.0
    cost: float | None = 0.0
    for t in values:
        calls, prompt, completion, errors = calls + t.calls, prompt + t.prompt_tokens, \
            completion + t.completion_tokens, errors + t.errors
        latency += t.latency
        cost = None if cost is None or t.cost is None else cost + t.cost
    return Totals(calls, prompt, completion, cost, latency, errors)


# -- export -----------------------------------------------------------------------------------
@runs.command("export")
@click.option("--out", "-o", "out", type=click.Path(dir_okay=False, writable=True),
              help="File to write (.jsonl or .parquet).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "parquet", "otlp"]),
              help="Output format; by default from the --out suffix. otlp sends spans to --endpoint instead.")
@click.option("--endpoint", metavar="URL", help="With --format otlp: the OTLP/HTTP collector "
              "(http://HOST:4318, or its /v1/traces URL).")
@click.option("--header", "headers", multiple=True, metavar="NAME=VALUE",
              help="With --format otlp: a header for the collector (repeatable); $VAR values are read from the "
                   "environment, so keys stay out of the shell history.")
@click.option("--capture-content", is_flag=True, help="With --format otlp: send prompts and outputs too.")
@click.option("--run", "run_refs", multiple=True, metavar="RUN",
              help="Export this run (an id or a unique prefix); repeat for more. With filters: runs listed "
                   "and matching.")
@run_filters
def export_command(out: str | None, fmt: str | None, endpoint: str | None, headers: tuple[str, ...],
                   capture_content: bool, run_refs: tuple[str, ...], **filter_values: Any) -> None:
    """Export recorded calls, one row per trace, to JSONL or Parquet, or as OpenTelemetry spans (OTLP).

    Each row has the run (id, graph, dataset, item, status, seed), the trace (id, node, index,
    kind, alias, model, backend), its request (messages, prompt, params), its output (text,
    answer, token ids, logprobs), usage, cost, latency, status, the trace ids it read (inputs)
    and its rewards. Nothing selected means every run. Load the file with
    datasets.load_dataset("json" or "parquet", data_files=PATH) or pandas.

    \b
    Parquet needs pip install 'scaffold-sdk[parquet]'; OTLP, pip install 'scaffold-sdk[otel]'.

    \b
    Examples:
      scaffold runs export --out calls.jsonl
      scaffold runs export --out calls.parquet --graph rsa --status ok --since 7d   # needs scaffold-sdk[parquet]
      scaffold runs export --out one.jsonl --run 3f2a9c --run 81be07
      scaffold runs export --format otlp --endpoint http://127.0.0.1:4318 --since 1d   # needs scaffold-sdk[otel]
    """
    from scaffold.store._export import export, export_format

    if fmt == "otlp":
        _export_otlp(endpoint, headers, capture_content, run_refs, filter_values)
        return
    if out is None:
        raise click.UsageError("--out is required (or --format otlp --endpoint URL)")
    try:
        fmt = export_format(out, fmt)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from None
    store = _store()
    run_ids = [resolve_run(store, ref) for ref in run_refs] if run_refs else None
    try:
        written = export(store, out, format=fmt, run_ids=run_ids, **_filters(**filter_values))
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None
    click.echo(f"wrote {written} row{'s' if written != 1 else ''} to {out}")


def _export_otlp(endpoint: str | None, headers: tuple[str, ...], capture_content: bool, run_refs: tuple[str, ...],
                 filter_values: dict[str, Any]) -> None:
    """``runs export --format otlp``: the selected runs as spans to a collector."""
    import os

    from scaffold._otel import export_otlp

    if not endpoint:
        raise click.UsageError("--format otlp needs --endpoint URL (an OTLP/HTTP collector)")
    sent_headers = {}
    for header in headers:
        name, sep, value = header.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{header!r} is not NAME=VALUE", param_hint="--header")
        if value.startswith("$"):
            if value[1:] not in os.environ:
                raise click.BadParameter(f"${value[1:]} is not set", param_hint="--header")
            value = os.environ[value[1:]]
        sent_headers[name.strip()] = value
    store = _store()
    run_ids = [resolve_run(store, ref) for ref in run_refs] if run_refs else None
    try:
        spans = export_otlp(store, endpoint, run_ids=run_ids, headers=sent_headers, capture_content=capture_content,
                            **_filters(**filter_values))
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"sent {spans} span{'s' if spans != 1 else ''} to {endpoint}")
