"""The parts task (a pocket task where the set matters), its scoring, and the positive control of set-level signal."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaffold.pocket import PartsTask, split_of
from scaffold.pocket._parts_eval import coverage_at, covered, part_vote, vote
from trainers.set_signal import set_signal

# one pytest-xdist worker runs the module, so its quick build (a module fixture) is built once, not once per worker
pytestmark = pytest.mark.xdist_group("parts")

TASK = PartsTask()
PROBLEM = "A:0018+0063 B:0149+0624 C:2737+9555"
ANSWER = "A=81,B=773,C=12292"


def test_a_problem_has_labelled_parts_and_a_tuple_answer() -> None:
    assert TASK.parts(PROBLEM) == {"A": "0018+0063", "B": "0149+0624", "C": "2737+9555"}
    assert TASK.answer(PROBLEM) == ANSWER
    rows = TASK.problems(50, seed=3, split="validation")
    assert len({r["problem"] for r in rows}) == 50
    assert all(split_of(r["problem"]) == "validation" and TASK.answer(r["problem"]) == r["answer"] for r in rows)
    test = {r["problem"] for r in TASK.problems(200, seed=0, split="test")}
    assert not test & {r["problem"] for r in TASK.problems(200, seed=0, split="train")}


@pytest.mark.parametrize("bad", ["A:0018+0063+0001 B:0149+0624 C:2737+9555", "A:0018+0063 B:0149+0624",
                                 "B:0018+0063 A:0149+0624 C:2737+9555", "A:18+63 B:0149+0624 C:2737+9555",
                                 "A:0018+0063 B:1149+0624 C:2737+9555", "0018+0063"])
def test_a_malformed_problem_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="not a parts"):
        TASK.parts(bad)


def test_a_candidate_works_one_part_and_is_scored_on_it() -> None:
    text = TASK.part_solution(PROBLEM, "B")
    assert text.splitlines()[0] == "B:0149+0624" and len(text.splitlines()) == 6
    assert {len(TASK.part_solution(PROBLEM, label)) for label in TASK.labels} == {len(text)}  # one length for all
    assert TASK.score("B=773", ANSWER) == 1.0 and TASK.score("B=0773", ANSWER) == 1.0
    assert TASK.score("B=774", ANSWER) == 0.0
    assert TASK.score("B=773", ANSWER, whole=True) == 0.0  # an aggregation must state every part
    slipped = TASK.part_solution(PROBLEM, "C", rng=random.Random(4), slips=1)
    from scaffold._answers import extract_boxed

    assert TASK.part_of(extract_boxed(slipped)) == "C" and TASK.score(extract_boxed(slipped), ANSWER) == 0.0
    assert extract_boxed(text) == "A=?????,B=00773,C=?????" and TASK.part_of(extract_boxed(text)) == "B"
    assert TASK.score("A=?????,B=?????,C=?????", ANSWER) == 0.0 and TASK.part_of("A=?????,B=?????,C=?????") is None


def test_the_longest_candidate_fits_the_solving_budget_and_two_parts_do_not() -> None:
    for task in (TASK, PartsTask(digits=(2, 2, 3), terms=3), PartsTask(digits=(3, 4))):
        widest = task.problems(1, seed=0)[0]["problem"]
        longest = max(len(task.part_solution(widest, label)) for label in task.labels) + 1  # one token a character
        shortest_two = 2 * min(len(task.part_solution(widest, label)) for label in task.labels)
        assert longest <= task.solve_budget() < shortest_two
        # the longest aggregation (every part copied but the longest, worked) fits its budget
        text = task.aggregation(widest, [task.part_solution(widest, label) for label in task.labels[:-1]])
        assert len(text) + 1 <= task.aggregate_budget()


def test_an_aggregation_copies_given_parts_and_works_at_most_one() -> None:
    right_a, wrong_b = "\\boxed{A=081}", "\\boxed{A=?????,B=0763,C=?????}"
    text = TASK.aggregation(PROBLEM, [right_a, wrong_b, "\\boxed{A=082}"])
    lines = text.splitlines()
    # the part none gives worked first; of a tie the first stated A; B as given (wrong: it copies)
    assert lines[0] == "C:2737+9555" and lines[-1] == "\\boxed{A=081,B=0763,C=12292}"
    assert lines[1:-1] == TASK.part_solution(PROBLEM, "C").splitlines()[1:-1]  # worked as a candidate works it
    voted = TASK.aggregation(PROBLEM, [right_a, "\\boxed{A=082}", "A=082,B=773"]).splitlines()
    assert voted[-1] == "\\boxed{A=082,B=773,C=12292}"  # the value most state, even a wrong one: what is read decides
    lacking_two = TASK.aggregation(PROBLEM, [right_a])
    assert lacking_two.splitlines()[0] == "B:0149+0624"
    assert lacking_two.splitlines()[-1] == "\\boxed{A=081,B=00773,C=?????}"
    every = TASK.aggregation(PROBLEM, [TASK.part_solution(PROBLEM, label) for label in TASK.labels])
    assert every == "\\boxed{A=00081,B=00773,C=12292}"  # every part given: nothing to work
    assert TASK.score("A=081,B=773,C=?????", ANSWER, whole=True) == 0.0
    assert TASK.score("A=081,B=773,C=?????", ANSWER) == 1.0  # a blank slot states nothing
    assert TASK.score("A=081,B=773,C=12292", ANSWER, whole=True) == 1.0
    # tuples are read like parts: an RSA step that reads aggregations copies them
    assert TASK.aggregation(PROBLEM, [lacking_two]).splitlines()[-1] == "\\boxed{A=081,B=00773,C=12292}"
    # every candidate and every aggregation lacking one part is as long as any other: values sit at fixed places
    assert len({len(TASK.part_solution(PROBLEM, label)) for label in TASK.labels}) == 1
    full = [TASK.part_solution(PROBLEM, label) for label in TASK.labels]
    assert len({len(TASK.aggregation(PROBLEM, full[:i] + full[i + 1:])) for i in range(3)}) == 1


def test_an_aggregation_prompt_shows_each_candidate_s_tuple_at_fixed_places() -> None:
    from scaffold import Trace

    texts = [TASK.part_solution(PROBLEM, "C"), "\\boxed{A=81}", "no answer", TASK.aggregation(PROBLEM, ["A=81"])]
    shown = TASK.show_candidates([*texts[:3], Trace(id="t", run_id="r", node="n", index=0, text=texts[3])])
    assert shown.splitlines() == ["Candidate 1: A=?????,B=?????,C=12292", "Candidate 2: A=81,B=?????,C=?????",
                                  "Candidate 3: A=?????,B=?????,C=?????", "Candidate 4: A=81,B=00773,C=?????"]
    # the aggregation the build trains on reads what the prompt shows: the same tuple whatever the worked lines
    assert TASK.aggregation(PROBLEM, texts) == TASK.aggregation(PROBLEM, [line.split(": ")[1] for line in
                                                                           shown.splitlines()])


def test_reading_answers() -> None:
    assert TASK.read("A=1,C=?") == TASK.read("A=1,C=?????") == {"A": "1", "C": "?"}
    for bad in (None, "", "1417", "A=1,A=2", "D=4", "A=x"):
        assert TASK.read(bad) is None
    assert TASK.vote_key("C=012,A=3") == "A=3,C=12"


def test_the_rule_vote_and_the_population_vote() -> None:
    assert part_vote(TASK, ["A=1", "B=2", "A=1", "C=3"]) == "A=1,B=2,C=3"
    assert part_vote(TASK, ["A=1", "B=2", "A=1", "A=3"]) is None  # C stated by none: a rule cannot work it
    assert vote(TASK, ["A=1,B=2,C=3", "A=01,B=2,C=3", "A=1,B=2,C=4", None]) == "A=1,B=2,C=3"
    assert covered(TASK, ["A=81", "A=94", "B=773", None], ANSWER) == {"A", "B"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["A", "B", "C", "wrong"]), min_size=1, max_size=9), st.integers(1, 9))
def test_coverage_at_is_the_exact_chance_over_every_subset(members: list[str], m: int) -> None:
    m = min(m, len(members))
    subsets = list(itertools.combinations(range(len(members)), m))
    hits = sum({members[i] for i in s} >= {"A", "B", "C"} for s in subsets)
    counts = [members.count(label) for label in "ABC"]
    assert coverage_at(counts, len(members), m) == pytest.approx(hits / len(subsets))


def test_the_positive_control_finds_coverage_when_it_matters_and_not_when_only_the_count_does() -> None:
    rng = random.Random(0)
    mattering, count_only = [], []
    for _ in range(3000):
        parts = [rng.choice("AAB C") for _ in range(4)]
        right = [p for p in parts if p != " " and rng.random() < 0.7]
        coverage, diversity = len(set(right)), len(set(parts) - {" "})
        mattering.append({"success": float(coverage >= 2 and rng.random() < 0.8), "right": len(right),
                          "coverage": coverage, "diversity": diversity})
        count_only.append({"success": float(rng.random() < 0.2 * len(right)), "right": len(right),
                           "coverage": coverage, "diversity": diversity})
    found = set_signal(mattering)
    assert found.loglik_gain > 0.05 and found.p_value < 1e-10 and found.sets == 3000
    assert found.by_feature["coverage"]["1"]["success"] == 0.0
    null = set_signal(count_only)
    assert abs(null.loglik_gain) < 0.01 and null.p_value > 1e-3
    with pytest.raises(ValueError, match="at least 20"):
        set_signal(mattering[:5])
    with pytest.raises(ValueError, match="'coverage'"):
        set_signal([{"success": 1.0, "right": 1}] * 30)


# --- the build, the CLI and the experiment, on a seconds-sized build (real torch) ---------------------------------


@pytest.fixture(scope="module")
def quick_parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quick parts build (0.14M parameters, 200 steps): every stage of the build, not trained to the regime."""
    from scaffold.pocket import PartsConfig, parts_model

    return parts_model(tmp_path_factory.mktemp("parts-cache"), config=PartsConfig.quick(), progress=False)


def test_a_quick_build_saves_a_model_its_config_and_a_report(quick_parts: Path) -> None:
    from scaffold.pocket import PartsConfig, load_report
    from scaffold.pocket._parts_build import parts_config

    assert parts_config(quick_parts) == PartsConfig.quick()
    report = load_report(quick_parts)
    assert report["steps"] == 200 and report["params"] < 200_000
    assert set(report["shares"]) == {"A", "B", "C", "none"} and abs(sum(report["shares"].values()) - 1) < 1e-9
    for key in ("pass1", "pass8", "maj4", "agg4", "cover4", "entropy_search", "top_share"):
        assert 0.0 <= report["held_out"][key] <= 8.0
    assert report["in_regime"] is False  # 200 steps: nothing learned yet, and the report says so
    # solving alone until the first check (the quick build's part_floor is 0), then solving and aggregating together
    assert report["parts_learned_at"] == 100 and [step for step, _ in report["checks"]] == [100, 200]
    with pytest.raises(ValueError, match="no scaffold.json"):
        parts_config(quick_parts.parent)


def test_score_parts_scores_every_problem_and_is_seeded(quick_parts: Path) -> None:
    from scaffold.pocket import score_parts

    rows = TASK.problems(6, seed=2, split="validation")
    one = score_parts(quick_parts, rows, samples=8, rsa_steps=1, pass_at=(2, 8), seed=5)
    again = score_parts(quick_parts, rows, samples=8, rsa_steps=1, pass_at=(2, 8), seed=5)
    assert one.scores == again.scores
    assert set(one.scores) >= {"pass1", "pass2", "pass8", "maj4", "agg4", "rsa_pop", "rsa_vote", "entropy_search"}
    assert all(len(v) == 6 for v in one.scores.values())
    assert all(a <= b + 1e-12 for a, b in zip(one.scores["pass2"], one.scores["pass8"]))  # more samples cover more
    with pytest.raises(ValueError, match="multiple of k"):
        score_parts(quick_parts, rows, samples=8, rsa_n=6)


def test_the_cli_builds_the_parts_model_and_writes_its_problems(quick_parts: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from scaffold.cli import main

    runner = CliRunner()
    cache = quick_parts.parent.parent  # <cache>/pocket/parts-<fingerprint>
    built = runner.invoke(main, ["pocket", "build", "--task", "parts", "--quick", "--cache-dir", str(cache)])
    assert built.exit_code == 0, built.output
    assert f"parts model: {quick_parts}" in built.output and "parts chosen: A" in built.output
    out = tmp_path / "parts.jsonl"
    written = runner.invoke(main, ["pocket", "problems", "--task", "parts", "--n", "5", "--out", str(out)])
    assert written.exit_code == 0, written.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(TASK.answer(r["problem"]) == r["answer"] for r in rows)
    bad = runner.invoke(main, ["pocket", "problems", "--task", "parts", "--digits", "3", "--out", str(out)])
    assert bad.exit_code == 2 and "--digits" in bad.output


@pytest.mark.slow
def test_the_experiment_runs_in_chunks_and_ends_with_its_json(quick_parts: Path, tmp_path: Path) -> None:
    """examples/train_spiral.py on the quick build, a tiny plan: stopped by --max-minutes, then resumed to the end."""
    import subprocess
    import sys

    plan = [sys.executable, "examples/train_spiral.py", "--model-dir", str(quick_parts), "--steps", "2",
            "--problems-per-step", "2", "--eval-problems", "6", "--eval-samples", "8", "--control-problems", "20",
            "--seeds", "0", "--methods", "grpo", "spiral", "--snapshot-every", "1", "--results", str(tmp_path / "r"),
            "--out", str(tmp_path / "o")]
    stopped = subprocess.run([*plan, "--max-minutes", "0"], capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "run the same command again" in stopped.stdout
    assert len((tmp_path / "r" / "grpo-s0.jsonl").read_text().splitlines()) == 1  # one step, then stopped
    done = subprocess.run(plan, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grpo-s0: resuming after step 1" in done.stdout
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "train_spiral" and figures["task"] == TASK.name
    assert figures["positive_control"]["sets"] == 80 and "loglik_gain" in figures["positive_control"]
    for method in ("grpo", "spiral"):
        for key in ("pass1", "pass8", "maj4", "agg4", "rsa_pop", "rsa_vote", "entropy_search"):
            assert key in figures["results"][method]["after"] and key in figures["ci95"][method]["after"]
    assert figures["rollouts_per_problem"] == {"grpo": 24, "spiral": 24} and figures["steps"] == 2
    steps = [json.loads(line) for line in (tmp_path / "r" / "spiral-s0.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and set(steps[0]["part_shares"]) == {"A", "B", "C"}
    assert steps[0]["set_diversity"] is not None and "search" in steps[0]["roles"]
    again = subprocess.run(plan, capture_output=True, text=True, timeout=600)  # everything reused
    assert json.loads(again.stdout.strip().splitlines()[-1])["results"] == figures["results"]
    control = subprocess.run([*plan, "--control-only"], capture_output=True, text=True, timeout=600)
    assert control.returncode == 0, control.stderr[-3000:]
    alone = json.loads(control.stdout.strip().splitlines()[-1])
    assert {k: alone["positive_control"][k] for k in figures["positive_control"]} == figures["positive_control"]
    assert "heldout_full" in alone["positive_control"] and "results" not in alone  # the whole control, read back
    # the same config with other weights (as an Intel build of an AMD one's config): nothing is reused
    import shutil

    from safetensors.torch import load_file, save_file

    other = shutil.copytree(quick_parts, tmp_path / "other-weights")
    weights = next(other.glob("*.safetensors"))
    tensors = load_file(weights)
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 1e-3
    save_file(tensors, weights, metadata={"format": "pt"})
    keyed = json.loads((tmp_path / "r" / "control.json").read_text())["key"]["base"]
    moved = subprocess.run([*plan, "--control-only", "--model-dir", str(other)], capture_output=True, text=True,
                           timeout=600)
    assert moved.returncode == 0, moved.stderr[-3000:]
    rekeyed = json.loads((tmp_path / "r" / "control.json").read_text())["key"]["base"]
    assert rekeyed != keyed and rekeyed.rsplit("-", 1)[0] == keyed.rsplit("-", 1)[0]  # same config, other weights


def test_solving_and_aggregating_examples_trained_together_take_the_step_one_batch_of_both_would() -> None:
    """``update_together`` pads each batch on its own, yet gives the loss and the weights of one step on all of them."""
    import torch

    from scaffold.pocket import PartsConfig
    from scaffold.pocket._parts_build import PartsExamples
    from scaffold.pocket._tokenizer import build_tokenizer
    from scaffold.pocket._train import new_model, update, update_together

    config = PartsConfig.quick()
    tokenizer = build_tokenizer()
    examples = PartsExamples(config, tokenizer, seed=4)
    solving, aggregating = examples.solving(3), examples.aggregation(2)
    assert max(len(ids) for ids, _ in solving) < min(len(ids) for ids, _ in aggregating)  # padded apart: shorter
    results = []
    for together in (True, False):
        model = new_model(config.model_config(7), tokenizer)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # weights move by the gradient itself: compared
        loss = (update_together(model, optimizer, [solving, aggregating], tokenizer.pad_token_id, 0.1) if together
                else update(model, optimizer, solving + aggregating, tokenizer.pad_token_id, 0.1))
        results.append((loss, [p.detach().clone() for p in model.parameters()]))
    (loss_a, weights_a), (loss_b, weights_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights_a, weights_b))
    start = new_model(config.model_config(7), tokenizer)
    assert any(not torch.allclose(a, b) for a, b in zip(weights_a, start.parameters()))  # the step moved them
