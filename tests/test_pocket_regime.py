"""The aggregation regime, how a build selects its checkpoint, own-candidate examples, and per-problem scores."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_pocket_counts

from scaffold.pocket import PocketConfig, PocketTask, Regime, aggregate_prompt, build_tokenizer, split_of
from scaffold.pocket._evaluate import check_figures, problem_scores
from scaffold.pocket._examples import Examples
from scaffold.pocket._regime import Selection

INSIDE = {"pass1": 0.40, "pass8": 0.90, "maj8": 0.55, "maj4": 0.50, "agg4": 0.65}


def figures(**changes: float) -> dict[str, float]:
    return {**INSIDE, **changes}


# -- the criteria -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("changes", "missed"), [
    ({"pass1": 0.24}, "pass1"),
    ({"pass1": 0.61, "pass8": 1.0, "maj8": 0.7}, "pass1"),
    ({"pass8": 0.59}, "pass8"),
    ({"maj8": 0.40}, "maj8"),
    ({"agg4": 0.549}, "agg4"),
])
def test_each_regime_criterion_fails_on_its_own(changes: dict[str, float], missed: str) -> None:
    """Figures inside every criterion hold; moving one figure past its bar fails exactly that criterion."""
    assert Regime().holds(INSIDE)
    failures = Regime().failures(figures(**changes))
    assert len(failures) == 1 and failures[0].startswith(missed), failures


def test_a_margin_tightens_every_criterion() -> None:
    """With margin 0.05 the band shrinks at both ends and every bar rises by 0.05."""
    regime = Regime()
    assert regime.holds(figures(pass1=0.27))
    assert not regime.holds(figures(pass1=0.27), margin=0.05)
    assert regime.holds(figures(agg4=0.58)) and not regime.holds(figures(agg4=0.58), margin=0.05)
    assert regime.holds(figures(maj8=0.43)) and not regime.holds(figures(maj8=0.43), margin=0.05)
    assert regime.holds(INSIDE, margin=0.05)


# -- checkpoint selection ---------------------------------------------------------------------------
def selection(**kwargs: Any) -> Selection:
    options: dict[str, Any] = {"margin": 0.05, "target_pass1": 0.38, "after_eligible": 2, "max_checks": 10}
    return Selection(Regime(), **{**options, **kwargs})


def test_selection_keeps_the_eligible_checkpoint_nearest_the_target() -> None:
    """Of checkpoints meeting the regime with margin, the one whose pass@1 is nearest the target is kept."""
    chosen = selection()
    for step, pass1 in ((10, 0.20), (20, 0.33), (30, 0.45), (40, 0.52)):
        chosen.add(step, figures(pass1=pass1, pass8=min(1.0, 2.2 * pass1), maj8=pass1 + 0.12), [step])
    assert chosen.choose() is not None and chosen.choose().step == 20  # type: ignore[union-attr]
    assert chosen.done  # two checks followed the first eligible one (step 20)


def test_selection_is_not_done_while_climbing_and_ends_past_the_band() -> None:
    """Below the band it keeps checking; a check past the band narrowed by the margin, or the budget, ends it."""
    chosen = selection()
    chosen.add(10, figures(pass1=0.2), [])
    chosen.add(20, figures(pass1=0.54, pass8=1.0, maj8=0.7), [])
    assert not chosen.done
    chosen.add(30, figures(pass1=0.56, pass8=1.0, maj8=0.8), [])
    assert chosen.done
    capped = selection(max_checks=2)
    capped.add(10, figures(pass1=0.1), [])
    capped.add(20, figures(pass1=0.1), [])
    assert capped.done


def test_selection_falls_back_to_the_untightened_regime_then_to_the_fewest_misses() -> None:
    """Nothing eligible with margin: a checkpoint inside the plain regime; nothing inside: the fewest misses."""
    plain = selection()
    plain.add(10, figures(agg4=0.57), ["in"])  # inside the regime, not by the margin
    plain.add(20, figures(agg4=0.40), ["out"])
    assert plain.choose().weights == ["in"]  # type: ignore[union-attr]
    worst = selection()
    worst.add(10, figures(agg4=0.40, maj8=0.3), ["two misses"])
    worst.add(20, figures(agg4=0.40), ["one miss"])
    assert worst.choose().weights == ["one miss"]  # type: ignore[union-attr]
    assert selection().choose() is None
    assert plain.eligible is False and worst.eligible is False  # inside the plain regime is not eligible


def test_a_training_with_no_eligible_checkpoint_is_retried_from_a_derived_seed(tmp_path: Path) -> None:
    """A real (tiny) build whose first training checks nothing trains afresh from seed + 1000, up to attempts.

    In native arithmetic, in this process: three steps check nothing on any CPU, and the retry is the same code
    in a portable build's child (a child's start would only add an interpreter and torch per build here).
    """
    from scaffold.pocket import build_pocket_model

    config = PocketConfig.quick(max_steps=3, attempts=2, seed=4, eval_problems=4, portable=False)
    report = build_pocket_model(tmp_path / "model", config, progress=False)
    assert (report.attempts, report.trained_seed, report.steps) == (2, 1004, 3)
    once = build_pocket_model(tmp_path / "once", PocketConfig.quick(max_steps=3, seed=4, eval_problems=4, attempts=1,
                                                                    portable=False), progress=False)
    assert (once.attempts, once.trained_seed) == (1, 4)
    with pytest.raises(ValueError, match="attempts"):
        build_pocket_model(tmp_path / "none", PocketConfig.quick(attempts=0), progress=False)


def _scripted_training(monkeypatch: pytest.MonkeyPatch, climb: list[float], **overrides: Any) -> tuple[Any, list]:
    """train() on a tiny real model whose climb checks read ``climb`` in turn (the last value repeats); returns
    the Trained and the calls made, as ("climb", step) and ("regime", step)."""
    import scaffold.pocket._train as train_module

    calls: list[tuple[str, int]] = []
    readings = iter(climb)
    last = [0.0]

    def climb_check(model: Any, tokenizer: Any, task: Any, rows: Any, *, samples: int, seed: int) -> float:
        step = seed - config.seed
        calls.append(("climb", step))
        last[0] = next(readings, last[0])
        return last[0]

    def regime_check(model: Any, tokenizer: Any, task: Any, rows: Any, *, seed: int) -> dict[str, float]:
        calls.append(("regime", seed - config.seed))
        return figures(pass1=last[0], agg4=0.57)  # inside the regime, never eligible with the margin

    monkeypatch.setattr(train_module, "check_accuracy", climb_check)
    monkeypatch.setattr(train_module, "check_figures", regime_check)
    config = PocketConfig.quick(check_from=1, check_every=1, select_every=2, own_share=0.0, seed=3, **overrides)
    tokenizer = build_tokenizer()
    model = train_module.new_model(config, tokenizer)
    rows = config.task.problems(48, seed=1, split="validation")
    return train_module.train(model, tokenizer, config, rows, lambda _: None), calls


def test_the_selection_gate_checks_the_regime_only_from_the_band_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """With select_gate, a selection step below the band makes one climb-sized check and no regime check; once a
    check reads the band, every selection step is a regime check alone."""
    trained, calls = _scripted_training(monkeypatch, [0.0, 0.2, 0.22, 0.24, 0.3], select_gate=True,
                                        select_max_checks=3, max_steps=40)
    # climb checks come every other step while nothing is answered: step 2 reads 0.0, step 4 reads 0.2 >=
    # select_from: selecting; steps 6 and 8 read 0.22 and 0.24, under the band's 0.25; step 10 reads 0.3, so its
    # regime check follows, and steps 12 and 14 check the regime directly (three checks: the limit)
    assert calls == [("climb", 2), ("climb", 4), ("climb", 6), ("climb", 8), ("climb", 10), ("regime", 10),
                     ("regime", 12), ("regime", 14)]
    assert [step for step, _ in trained.checks] == [2, 4, 6, 8, 10]
    assert [c.step for c in trained.selection.checkpoints] == [10, 12, 14] and trained.steps == 14


def test_without_the_gate_every_selection_step_checks_the_regime(monkeypatch: pytest.MonkeyPatch) -> None:
    trained, calls = _scripted_training(monkeypatch, [0.0, 0.2], select_gate=False, select_max_checks=3,
                                        max_steps=40)
    assert calls == [("climb", 2), ("climb", 4), ("regime", 6), ("regime", 8), ("regime", 10)]
    assert trained.steps == 10


def test_a_climb_stalled_under_the_band_ends_at_the_selection_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gated looks count toward select_max_checks: a climb that never reaches the band does not train to max_steps."""
    trained, calls = _scripted_training(monkeypatch, [0.2], select_gate=True, select_max_checks=4, max_steps=500)
    assert calls == [("climb", 2), ("climb", 4), ("climb", 6), ("climb", 8), ("climb", 10)]
    assert trained.steps == 10 and not trained.selection.checkpoints


def test_a_training_lands_only_when_its_checkpoint_is_eligible_and_confirmed() -> None:
    """landed(): eligible on the selection checks with the margin, and inside the regime on fresh problems."""
    from scaffold.pocket._train import Trained, landed

    def trained(*looks: dict[str, float]) -> Trained:
        chosen = Selection(Regime(), margin=0.05, target_pass1=0.38, after_eligible=3, max_checks=24)
        for step, look in enumerate(looks):
            chosen.add(10 * step, look, [])
        return Trained(steps=10 * len(looks), chosen_step=0, checks=[], selection=chosen)

    eligible = trained(figures(agg4=0.70))  # +0.20 over maj@4: eligible with the margin
    config = PocketConfig()
    assert landed(config, eligible, figures(agg4=0.56))  # confirmed inside the regime (no margin needed)
    assert not landed(config, eligible, figures(agg4=0.54))  # selection's gain did not hold on fresh problems
    assert not landed(config, trained(figures(agg4=0.57)), figures())  # inside, not by the margin: never eligible
    assert landed(PocketConfig(confirm_problems=0), eligible, {})  # no confirmation asked
    assert not landed(config, trained(), {})


def test_confirmation_problems_are_validation_problems_selection_never_read() -> None:
    """The build's one draw of validation problems splits into selection's and confirmation's, disjoint."""
    config = PocketConfig()
    looked = max(config.check_problems, config.select_problems)
    rows = config.task.problems(looked + config.confirm_problems, seed=1, split="validation")
    assert rows[:looked] == config.task.problems(looked, seed=1, split="validation")  # selection's set unchanged
    confirming = {row["problem"] for row in rows[looked:]}
    assert len(confirming) == config.confirm_problems and not confirming & {row["problem"] for row in rows[:looked]}
    assert {split_of(p) for p in confirming} == {"validation"}


# -- splits and examples ----------------------------------------------------------------------------
def test_validation_split_is_its_own_tenth_of_the_task() -> None:
    """Validation problems are disjoint from train and test ones, a tenth of all problems, and drawable."""
    task = PocketTask(digits=2, terms=2)
    validation = {row["problem"] for row in task.problems(500, seed=0, split="validation")}
    assert {split_of(p) for p in validation} == {"validation"}
    everything = [f"{a}+{b}" for a in range(10, 100) for b in range(10, 100)]
    assert sum(split_of(p) == "validation" for p in everything) == 809  # of 8,100: a tenth, by each problem's hash
    stream = task.stream(random.Random(0), "train")
    assert not validation & {next(stream) for _ in range(2000)}


def test_aggregation_examples_use_the_own_pool_at_its_share() -> None:
    """With a pool, own_share of aggregation examples read the pooled candidates; the rest are synthetic."""
    task = PocketTask(digits=2, terms=2)
    tokenizer = build_tokenizer()
    examples = Examples(task, tokenizer, seed=0, own_share=0.5)
    marker = "7+7=14+0=14\n\\boxed{own}"
    examples.pool = [(f"{10 + i % 80}+{20 + i % 70}", [marker] * 4) for i in range(200)]
    batch = examples.aggregation(200)
    own = sum(marker in tokenizer.decode(ids) for ids, _ in batch)
    assert own == 90 and len(examples.pool) == 200 - own  # half of 200 by a seeded draw: 90 with seed 0
    examples.pool = []
    assert not any(marker in tokenizer.decode(ids) for ids, _ in examples.aggregation(20))


def test_refill_samples_four_candidates_per_problem_from_the_model(pocket_quick: tuple[Path, Any]) -> None:
    """A refill draws train problems and four of the model's own temperature-1 solutions of each."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _ = pocket_quick
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    examples = Examples(PocketConfig.quick().task, tokenizer, seed=0, own_share=1.0)
    examples.refill(model, 6, seed=3)
    assert len(examples.pool) == 6
    assert all(split_of(problem) == "train" and len(candidates) == 4 for problem, candidates in examples.pool)
    assert sum("\\boxed{" in c for _, candidates in examples.pool for c in candidates) >= 12
    problem, candidates = examples.pool[-1]
    ids, start = examples.aggregation(1)[0]
    assert tokenizer.decode(ids[:start]).count(aggregate_prompt(problem, candidates)) == 1


# -- scores -----------------------------------------------------------------------------------------
def test_problem_scores_by_hand() -> None:
    """pass@1, pass@8, majorities over the whole and each half, and aggregation, per problem."""
    scores = problem_scores(
        ["5", "9"],
        [["5", "5", "1", "1", "1", "2", "5", None], ["1", "1", "1", "1", "2", "3", "4", "9"]],
        [["5", "1"], ["9", "9"]], k=4)
    assert scores["pass1"] == [3 / 8, 1 / 8]
    assert scores["pass8"] == [1.0, 1.0]
    assert scores["maj8"] == [1.0, 0.0]  # 5 and 1 tie 3 to 3 in the first: 5 was sampled first
    assert scores["maj4"] == [0.5, 0.0]  # first half: 5 and 1 tie, 5 first; second half: 1, 2, 5 tie, 1 first
    assert scores["agg4"] == [0.5, 1.0]


def test_check_figures_measures_a_live_model(pocket_quick: tuple[Path, Any]) -> None:
    """The build's regime check returns every figure as a count over its 12 problems, repeatably for one seed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _ = pocket_quick
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    rows = PocketConfig.quick().task.problems(12, seed=1, split="validation")
    first = check_figures(model, tokenizer, PocketConfig.quick().task, rows, seed=5)
    assert set(first) == {"pass1", "pass8", "maj8", "maj4", "agg4"}
    assert_pocket_counts(first, len(rows))
    assert check_figures(model, tokenizer, PocketConfig.quick().task, rows, seed=5) == first
