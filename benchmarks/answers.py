"""Answer kinds: multiple-choice extraction accuracy on a hand-labelled corpus, the math default unchanged, judge
calls per judged vote, and extraction time.

Measures, printing each figure beside its baseline from the same run:

- ``choice_accuracy``: the choice kind's accuracy on the held-out part of the corpus of multiple-choice phrasings
  (``tests/data/choice_phrasings_*.jsonl``: real model outputs from public repositories and threads, and phrasings
  written for it, every one labelled by hand). Held out: the ``blind4`` set (collected blind, never read: later
  changes of the extractor read the development half only) and the half of every other set a hash of the text
  picks, except ``blind2``, which was read in full while developing. Also printed: the development half and each
  file.
  Baseline: ``\\boxed{}`` extraction, the default before answer kinds (a boxed letter is the only form it
  reads).
- ``math_regression``: answers that differ between the default (math) kind and the extractor and equivalence
  that came before kinds (``extract_boxed``, ``equivalent``), over every reference solution of the shipped
  ``math500`` set paired with its own and a neighbour's answer: 0 means unchanged.
- ``judge_calls_per_vote_n8``: judge calls of a judged vote over a fixed list of eight free-text answers in three
  clusters, in a fixed order (a stand-in judge that knows the clusters); baseline: every pair, 28.
- ``extract_us``: microseconds per trace for the choice kind's extraction over the corpus; baseline: the math
  kind's ``\\boxed{}`` extraction over the same texts.

Usage: python benchmarks/answers.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaffold as sf  # noqa: E402
from scaffold._answers import equivalent, extract_boxed  # noqa: E402
from scaffold.answers import MathAnswer  # noqa: E402
from scaffold.testing import ScriptedBackend  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from choice_corpus import choice_of as kind_of  # noqa: E402  (the corpus and its split, as the tests read them)
from choice_corpus import corpus, held_out  # noqa: E402

EIGHT = ["Paris", "The capital is Lyon", "paris, France", "Marseille", "Lyon it is", "It's Paris",
         "Marseille, surely", "the city of Lyon"]
"""The judged vote's fixed list: eight answers in three clusters (the test of judged votes uses the same)."""


def accuracy(rows: list[dict[str, Any]], read: Any) -> float:
    return sum(read(r) == r["label"] for r in rows) / len(rows)


def boxed_letter(row: dict[str, Any]) -> str | None:
    """The baseline: ``\\boxed{}`` extraction, counted right when the boxed content is exactly the letter."""
    found = extract_boxed(row["text"])
    return found.strip() if found is not None and found.strip() in "ABCDEFGHIJ" and found.strip() else None


def math_regression() -> tuple[int, int]:
    rows = sf.load_problems("math500")
    kind = MathAnswer()
    changed = checked = 0
    for i, row in enumerate(rows):
        text = row.get("solution") or f"\\boxed{{{row['answer']}}}"
        other = rows[(i + 1) % len(rows)]["answer"]
        for reference in (row["answer"], other):
            checked += 1
            old = extract_boxed(text)
            new = kind.extract(text)
            changed += int(old != new or equivalent(old, reference) != kind.same(new, reference))
    return changed, checked


def judge_calls() -> int:
    def city(text: str) -> str:
        return next(c for c in ("paris", "lyon", "marseille") if c in text.lower())

    def judge(request: Any) -> str:
        first = request.last_content.split("Answer 1:\n")[1].split("\n\nAnswer 2:")[0]
        second = request.last_content.split("Answer 2:\n")[1].split("\n\n")[0]
        return "Same" if city(first) == city(second) else "Different"

    @sf.graph
    def judged(problem):
        return sf.vote(sf.sample("{problem}", model="m", n=8), equivalence=sf.judge(model="judge"))

    answers = iter(EIGHT)
    result = judged.run_sync({"problem": "Which city?"}, models={"m": ScriptedBackend(lambda r: next(answers)),
                                                                 "judge": ScriptedBackend(judge)},
                             answer_kind="text", store=None)
    return int(result.output.metadata["judge_calls"])


def per_trace_us(read: Any, texts: list[Any], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for text in texts:
            read(text)
        best = min(best, time.perf_counter() - started)
    return best / len(texts) * 1e6


def main() -> None:
    rows = corpus()
    held = [r for r in rows if held_out(r)]
    development = [r for r in rows if not held_out(r)]
    choice = accuracy(held, lambda r: kind_of(r).extract(r["text"]))
    baseline = accuracy(held, boxed_letter)
    print(f"corpus: {len(rows)} phrasings ({sum(r['source'] != 'written' for r in rows)} real model outputs), "
          f"{len(held)} held out")
    print(f"choice accuracy, held out: {choice:.4f}   (boxed-letter baseline {baseline:.4f}, "
          f"x{choice / baseline:.2f})")
    print(f"choice accuracy, development half: {accuracy(development, lambda r: kind_of(r).extract(r['text'])):.4f}")
    for name in sorted({r["file"] for r in rows}):
        part = [r for r in rows if r["file"] == name]
        print(f"  {name}: {accuracy(part, lambda r: kind_of(r).extract(r['text'])):.4f} ({len(part)})")
    changed, checked = math_regression()
    print(f"math regression: {changed} changed of {checked} answer checks (math500 solutions)")
    calls = judge_calls()
    print(f"judge calls for 8 answers in 3 clusters: {calls} (every pair: 28, x{calls / 28:.2f})")
    kinds = [(kind_of(r), r["text"]) for r in rows]
    choice_us = per_trace_us(lambda pair: pair[0].extract(pair[1]), kinds)
    math_us = per_trace_us(lambda pair: extract_boxed(pair[1]), kinds)
    print(f"extraction: choice {choice_us:.1f} us/trace, boxed {math_us:.1f} us/trace (x{choice_us / math_us:.1f})")
    print(json.dumps({"bench": "answers", "choice_accuracy": round(choice, 4), "choice_baseline": round(baseline, 4),
                      "held_out": len(held), "math_regression": changed, "math_checked": checked,
                      "judge_calls_per_vote_n8": calls, "judge_calls_every_pair": 28,
                      "extract_us": round(choice_us, 2), "extract_us_boxed": round(math_us, 2)}))


if __name__ == "__main__":
    main()
