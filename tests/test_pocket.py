"""The pocket model and task: problems, splits, export, tokenizer, prompts, a real tiny build, the cache."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_pocket_counts

import scaffold as sf
from scaffold._answers import equivalent, extract_boxed
from scaffold.pocket import (
    AGGREGATE_PROMPT,
    SOLVE_PROMPT,
    PocketConfig,
    PocketTask,
    Regime,
    aggregate_prompt,
    build_tokenizer,
    load_report,
    pocket_model,
    solve_prompt,
    split_of,
)
from scaffold.pocket._portable import x86_64
from scaffold.pocket._prompts import encode_example
from scaffold.pocket._tokenizer import ALPHABET
from scaffold.testing import ScriptedBackend

SCHEMA = {"id", "problem", "answer", "source"}


def chance(task: PocketTask) -> float:
    """The accuracy of always answering the most likely sum (the best answer that ignores the problem)."""
    low, high = 10 ** (task.digits - 1), 10**task.digits
    sums: Counter[int] = Counter({0: 1})
    for _ in range(task.terms):
        step: Counter[int] = Counter()
        for total, ways in sums.items():
            for operand in range(low, high):
                step[total + operand] += ways
        sums = step
    return max(sums.values()) / sum(sums.values())


# -- the task ---------------------------------------------------------------------------------------
def test_problems_are_deterministic_by_seed() -> None:
    """The same seed draws the same problems; another seed draws others."""
    task = PocketTask()
    assert task.problems(50, seed=3) == task.problems(50, seed=3)
    assert task.problems(50, seed=3) != task.problems(50, seed=4)
    assert len({row["problem"] for row in task.problems(200, seed=0)}) == 200


def test_train_and_test_splits_never_share_a_problem() -> None:
    """Splits are decided by each problem's text, so rows of either split, from any seeds, are disjoint."""
    task = PocketTask(digits=2, terms=2)
    train = {row["problem"] for seed in (0, 1) for row in task.problems(1500, seed=seed, split="train")}
    test = {row["problem"] for seed in (0, 1) for row in task.problems(600, seed=seed, split="test")}
    assert not train & test
    assert {split_of(p) for p in train} == {"train"} and {split_of(p) for p in test} == {"test"}
    stream = task.stream(random.Random(0), "train")
    assert all(split_of(next(stream)) == "train" for _ in range(500))


def test_asking_more_problems_than_a_split_has_raises() -> None:
    """The 1-digit pair task has 81 problems in all: 200 test problems cannot exist."""
    with pytest.raises(ValueError, match="test split"):
        PocketTask(digits=1, terms=2).problems(200, split="test")
    with pytest.raises(ValueError, match="split must be"):
        PocketTask().problems(5, split="valid")


def test_jsonl_export_matches_the_shared_schema(tmp_path: Path) -> None:
    """Exported rows have exactly id, problem, answer and source, all strings, source "pocket", ids unique."""
    task = PocketTask()
    path = task.write_jsonl(tmp_path / "pocket.jsonl", task.problems(20, seed=0, split="test"))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 20 and len({row["id"] for row in rows}) == 20
    for row in rows:
        assert set(row) == SCHEMA and all(isinstance(value, str) for value in row.values())
        assert row["source"] == "pocket"
        assert int(row["answer"]) == sum(map(int, row["problem"].split("+")))


def test_worked_solutions_box_the_reference_answer() -> None:
    """A solution's boxed answer is math-verify equivalent to the reference, leading zero included."""
    task = PocketTask(digits=2, terms=2)
    assert task.solution("12+34") == "2+4=06+0=06\n1+3=04+0=04\n\\boxed{046}"
    assert equivalent(extract_boxed(task.solution("12+34")), task.answer("12+34"))
    default = PocketTask()
    for row in default.problems(100, seed=1):
        assert equivalent(extract_boxed(default.solution(row)), row["answer"])


def test_slipped_solutions_are_wrong_but_shaped_like_right_ones() -> None:
    """A slipped solution has the right line count and widths but a wrong boxed answer."""
    task, rng = PocketTask(), random.Random(0)
    for row in task.problems(100, seed=2):
        right = task.solution(row).splitlines()
        for slips in (1, 2):
            wrong = task.slipped_solution(row["problem"], rng, slips=slips).splitlines()
            assert [len(line) for line in wrong] == [len(line) for line in right]
            assert not equivalent(extract_boxed("\n".join(wrong)), row["answer"])


# -- tokenizer and prompts ----------------------------------------------------------------------------
def test_tokenizer_round_trips_text_one_token_per_character(tmp_path: Path) -> None:
    """Every character is one token, text decodes back unchanged, and the saved tokenizer loads identically."""
    from transformers import AutoTokenizer

    tokenizer = build_tokenizer()
    text = "Add 12+34\n\n" + ALPHABET
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.decode(ids) == text
    assert len(tokenizer) == len(ALPHABET) + 3
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))  # as next to a saved model
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(text, add_special_tokens=False)["input_ids"] == ids


def test_tokenizer_has_the_chatml_template() -> None:
    """The chat template renders ChatML and ends an answer with the end-of-sequence token."""
    tokenizer = build_tokenizer()
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Add 1+2"}], add_generation_prompt=True,
                                             tokenize=False)
    assert rendered == "<|im_start|>user\nAdd 1+2<|im_end|>\n<|im_start|>assistant\n"
    ids, start = encode_example(tokenizer, "Add 1+2", "3")
    assert ids[start:] == [tokenizer.convert_tokens_to_ids("3"), tokenizer.eos_token_id]


def test_training_prompts_are_what_a_scaffold_run_sends() -> None:
    """sf.sample(SOLVE_PROMPT) and sf.aggregate(prompt=AGGREGATE_PROMPT) send exactly the texts trained on."""
    task = PocketTask()
    problem = task.problems(1, seed=0)[0]["problem"]
    candidates = [task.solution(problem), task.slipped_solution(problem, random.Random(0))]

    @sf.graph
    def solve_then_merge(problem: Any, given: Any) -> Any:
        sf.sample(SOLVE_PROMPT, model="m", n=1)
        return sf.aggregate(given, model="m", prompt=AGGREGATE_PROMPT)

    backend = ScriptedBackend(lambda request: "\\boxed{1}")
    solve_then_merge.run_sync({"problem": problem, "given": candidates}, models={"m": backend}, store=None)
    sent = sorted(request.last_content for request in backend.requests)
    assert sent == sorted([solve_prompt(problem), aggregate_prompt(problem, candidates)])


# -- a real build -------------------------------------------------------------------------------------
@pytest.fixture
def quick_model(pocket_quick: tuple[Path, Any]) -> tuple[Path, Any]:
    """The seconds-sized pocket model, trained from scratch once per session (see conftest)."""
    return pocket_quick


def test_quick_build_learns_the_task_far_above_chance(quick_model: tuple[Path, Any]) -> None:
    """The quick model answers held-out 2 x 2-digit sums at temperature 1 over ten times as often as chance."""
    path, report = quick_model
    floor = chance(PocketConfig.quick().task)
    assert floor < 0.012  # 90 of the 8,100 problems share the most common sum, 109
    assert report.pass1 >= 0.15 > 10 * floor
    config = PocketConfig.quick()
    figures = {name: getattr(report, name) for name in ("pass1", "pass8", "maj8", "maj4", "agg4")}
    assert report.eval["problems"] == config.eval_problems == 64
    assert_pocket_counts(figures, config.eval_problems, samples=config.eval_samples, k=config.eval_k)
    assert report.in_regime == config.regime.holds(figures)  # what the build says of its figures
    assert load_report(path)["pass1"] == report.pass1
    assert report.params < 200_000 and report.chosen_step <= report.steps <= PocketConfig.quick().max_steps
    assert report.selection and {step for step, _ in report.selection} >= {report.chosen_step}


@pytest.mark.slow
def test_the_default_build_lands_in_the_aggregation_regime(pocket_default: tuple[Path, Any]) -> None:
    """The model CI builds (the default config, seed 0) meets every regime criterion on its 100 held-out problems.

    pass@1 in [0.25, 0.60], pass@8 >= 1.5 x pass@1, maj@8 > pass@1, and the model's own greedy aggregation of
    its samples beats its vote over the same groups by 0.05. Portable seed 0 is not the same model on every CPU:
    measured +0.21 held out (step 640) on an AMD EPYC.
    """
    path, report = pocket_default
    figures = {name: getattr(report, name) for name in ("pass1", "pass8", "maj8", "maj4", "agg4")}
    assert Regime().failures(figures) == [] and report.in_regime
    problems = PocketConfig().eval_problems
    assert load_report(path)["in_regime"] is True and report.eval["problems"] == problems == 100
    assert_pocket_counts(figures, problems)
    chosen = dict(report.selection)[report.chosen_step]
    assert Regime().holds(chosen, margin=0.05)  # the kept checkpoint met the regime with margin on validation
    assert Regime().holds(report.confirmation)  # ... and on the validation problems selection never read
    # portable arithmetic exists on x86-64 only (elsewhere the build says it ran native); seed 0 landed at its first
    # training on both CPUs measured, but another CPU trains another model and may need the retry from seed 1000,
    # which is the build working as designed
    assert report.arithmetic.startswith("portable (" if x86_64() else "native (") and report.cpu
    assert report.trained_seed == 1000 * (report.attempts - 1) and report.attempts <= PocketConfig().attempts


def test_saved_model_answers_through_the_transformers_backend(quick_model: tuple[Path, Any]) -> None:
    """The saved directory loads in sf.TransformersBackend; greedy answers parsed from a graph are mostly right."""
    path, _ = quick_model
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False

    @sf.graph
    def solve(problem: Any) -> Any:
        return sf.generate(SOLVE_PROMPT, model="pocket", params={"temperature": 0, "max_tokens": 40})

    rows = PocketConfig.quick().task.problems(24, seed=5, split="test")
    backend = sf.TransformersBackend(path)
    try:
        results = solve.build().map_sync([{"problem": row["problem"]} for row in rows], models={"pocket": backend},
                                         store=None, concurrency=len(rows))
    finally:
        backend.close()
    assert all(result.ok and result.answer is not None for result in results)
    right = sum(equivalent(result.answer, row["answer"]) for result, row in zip(results, rows))
    assert right / len(rows) >= 0.3


# -- the cache ----------------------------------------------------------------------------------------
def test_pocket_model_builds_once_and_rebuilds_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call builds into <cache>/pocket/<fingerprint>, later calls reuse it, rebuild=True replaces it."""
    import scaffold.pocket._train as train

    builds: list[Path] = []

    def fake_build(out: Path, config: PocketConfig, *, progress: bool = True) -> None:
        builds.append(Path(out))
        (Path(out) / "pocket_report.json").write_text(json.dumps({"build": len(builds)}))

    monkeypatch.setattr(train, "build_pocket_model", fake_build)
    config = PocketConfig.quick()
    first = pocket_model(tmp_path, config=config, progress=False)
    assert first == tmp_path / "pocket" / config.fingerprint()
    assert pocket_model(tmp_path, config=config) == first and len(builds) == 1
    assert pocket_model(tmp_path, config=config, rebuild=True) == first and len(builds) == 2
    assert load_report(first) == {"build": 2}
    assert builds[0] != first  # built elsewhere, then renamed into place
    assert sorted(p.name for p in (tmp_path / "pocket").iterdir()) == [first.name]  # nothing left behind
    monkeypatch.setenv("SCAFFOLD_CACHE", str(tmp_path / "env"))
    assert pocket_model(config=config).parent == tmp_path / "env" / "pocket"


def test_a_failed_build_leaves_no_model_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build that raises leaves neither the model directory nor its temporary directory."""
    import scaffold.pocket._train as train

    def failing_build(out: Path, config: PocketConfig, *, progress: bool = True) -> None:
        (Path(out) / "half-written").write_text("x")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(train, "build_pocket_model", failing_build)
    with pytest.raises(RuntimeError, match="out of memory"):
        pocket_model(tmp_path, config=PocketConfig.quick())
    assert list((tmp_path / "pocket").iterdir()) == []


def test_config_fingerprint_names_what_changes_the_model() -> None:
    """Configs that train different models get different cache directories; equal configs the same one."""
    assert PocketConfig().fingerprint() == PocketConfig().fingerprint()
    assert PocketConfig(seed=1).fingerprint() != PocketConfig().fingerprint()
    assert PocketConfig.quick().fingerprint() != PocketConfig().fingerprint()


def test_exported_members_import() -> None:
    """Every name in scaffold.pocket.__all__ is importable and ``import *`` gives exactly ``__all__``."""
    import scaffold.pocket

    assert len(scaffold.pocket.__all__) == len(set(scaffold.pocket.__all__))
    namespace: dict[str, object] = {}
    exec("from scaffold.pocket import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(scaffold.pocket.__all__)


# -- the README's first command and the CLI -----------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> str:
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_demo_runs_every_topology_records_every_call_and_plots(quick_model: tuple[Path, Any],
                                                               tmp_path: Path) -> None:
    """pocket_demo.py on the quick model: a three-row table, per-step lines, a PNG, every call in the SQLite file."""
    path, _ = quick_model
    db, png = tmp_path / "demo.db", tmp_path / "plot.png"
    out = _run(["examples/pocket_demo.py", "--pocket-dir", str(path), "--problems", "6", "--population", "4",
                "--subset", "2", "--steps", "2", "--plot", str(png)], {"SCAFFOLD_STORE": str(db)})
    table = {line.rsplit(None, 4)[0]: line.rsplit(None, 4)[1:] for line in out.splitlines()
             if line.startswith(("single sample", "majority@4", "RSA N=4 K=2 T=2"))}
    assert list(table) == ["single sample", "majority@4", "RSA N=4 K=2 T=2"]
    assert all(float(wall) > 0 for *_, wall in table.values())
    assert [int(row[2]) for row in table.values()] == [6, 6 * 4, 6 * (4 + 2 * 4)]  # model calls per topology
    per_step = [line.split(":", 1)[1].split() for line in out.splitlines() if "of the population" in line]
    assert len(per_step) == 2 and all(len(values) == 3 for values in per_step)  # steps 0, 1, 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "--model openai/" in out and "vllm" in out
    store = sf.Store(db)
    try:
        runs = store.runs(dataset="pocket-demo")
        assert len(runs) == 3 * 6 and {run.status for run in runs} == {"ok"}
        by_graph = store.rollup("graph", dataset="pocket-demo")
        assert {graph: totals.calls for graph, totals in by_graph.items()} == {
            "single_sample": 6, "majority": 24, "rsa": 72}
        # the printed accuracy and tokens, recounted from the store: each run's recorded answer against its problem's
        # reference (the demo's rows: the model's task, 6 test problems of seed 0), and the calls' tokens
        from scaffold.pocket import pocket_task

        rows = pocket_task(path).problems(6, seed=0, split="test")
        for (accuracy, tokens, _, _), graph in zip(table.values(), ("single_sample", "majority", "rsa"), strict=True):
            mine = [run for run in runs if run.graph == graph]
            right = sum(equivalent(run.answer, rows[run.item or 0]["answer"]) for run in mine)
            assert sorted(run.item for run in mine) == list(range(6)) and accuracy == f"{right / 6:.2f}", graph
            assert int(tokens.replace(",", "")) == by_graph[graph].total_tokens > 0, graph
        rsa = next(run for run in runs if run.graph == "rsa")
        assert all(trace.token_ids for trace in store.traces(rsa.id) if trace.node != "vote")
    finally:
        store.close()


@pytest.mark.slow
def test_cli_builds_the_quick_model_once_and_writes_its_problems(pocket_quick_build: tuple[Path, str],
                                                                 tmp_path: Path) -> None:
    """`scaffold pocket build --quick` builds into the cache and reports; again, it reuses it; problems follow it.

    The first build is the session's quick model: conftest's ``pocket_quick_build`` ran that command into a
    fresh cache (the model every ``pocket_quick`` test uses), so the session trains it once.
    """
    cache, first = pocket_quick_build
    where = Path(next(line for line in first.splitlines() if line.startswith("pocket model:")).split(": ", 1)[1])
    assert where.parent == cache / "pocket" and (where / "config.json").is_file()
    assert "pass1" in first and "maj4" in first
    stamp = (where / "model.safetensors").stat().st_mtime_ns
    again = _run(["-m", "scaffold", "pocket", "build", "--quick", "--cache-dir", str(cache)], {})
    assert f"pocket model: {where}" in again and (where / "model.safetensors").stat().st_mtime_ns == stamp

    out = tmp_path / "test.jsonl"
    _run(["-m", "scaffold", "pocket", "problems", "--n", "12", "--model-dir", str(where), "--out", str(out)], {})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(len(row["problem"].split("+")) == 2 for row in rows)  # the quick task: 2 terms
    assert all(split_of(row["problem"]) == "test" for row in rows)


def test_cli_problems_writes_the_default_task_and_rejects_impossible_requests(tmp_path: Path) -> None:
    """Default problems are 3 x 3-digit sums in the shared schema; asking more than a split holds is a usage error."""
    from click.testing import CliRunner

    from scaffold.cli import main

    runner = CliRunner()
    out = tmp_path / "p.jsonl"
    done = runner.invoke(main, ["pocket", "problems", "--n", "5", "--split", "train", "--seed", "2", "--out", str(out)])
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == PocketTask().problems(5, seed=2, split="train")
    assert all(set(row) == SCHEMA and len(row["problem"].split("+")) == 3 for row in rows)
    done = runner.invoke(main, ["pocket", "problems", "--n", "200", "--digits", "1", "--terms", "2",
                                "--out", str(out)])
    assert done.exit_code == 2 and "test split" in done.output
    done = runner.invoke(main, ["pocket", "problems", "--model-dir", str(tmp_path), "--out", str(out)])
    assert done.exit_code == 2 and "no scaffold.json" in done.output


@pytest.mark.slow
def test_demo_runs_on_an_api_model_over_http(tmp_path: Path) -> None:
    """--model/--api-base: the same topologies over HTTP to an OpenAI-compatible server, with generic prompts."""
    import re

    from scaffold.testing import OpenAIServer

    seen: list[str] = []

    def adder(request: Any) -> str:  # a perfect "API model": sums the numbers of the problem it is shown
        seen.append(request.last_content)
        numbers = re.search(r"\d+(?:\+\d+)+", request.last_content)
        assert numbers is not None
        return f"The sum is \\boxed{{{sum(map(int, numbers.group(0).split('+')))}}}."

    db = tmp_path / "api.db"
    with OpenAIServer(policy=adder) as server:
        out = _run(["examples/pocket_demo.py", "--model", "openai/stand-in", "--api-base", server.base_url,
                    "--problems", "4", "--population", "2", "--subset", "2", "--steps", "1",
                    "--plot", str(tmp_path / "api.png")],
                   {"SCAFFOLD_STORE": str(db), "OPENAI_API_KEY": "sk-stand-in"})
    rows = [line.split() for line in out.splitlines() if line.startswith(("single sample", "majority@2", "RSA N="))]
    assert len(rows) == 3 and all(row[-4] == "1.00" for row in rows)
    assert len(seen) == 4 * (1 + 2 + 2 + 2) and all(text.startswith("Solve the problem") or "Problem" in text
                                                   for text in seen)
    assert (tmp_path / "api.png").is_file()
