"""Multiple-choice rows from JSONL, CSV, Parquet and a Hugging Face dataset directory; evaluations and the CLI on
multiple choice and free text, over real HTTP to the stand-in OpenAI server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold.answers import CHOICES_TEMPLATE, choice_rows, format_choices
from scaffold.evaluation import evaluate
from scaffold.testing import OpenAIServer, ScriptedBackend

ROOT = Path(__file__).resolve().parent.parent
ROWS = [
    {"question": "Capital of France?", "choices": ["Rome", "Paris", "Oslo"], "answer": "B"},
    {"question": "2+2?", "choices": ["3", "4", "5"], "answer": 1},  # a 0-based index, as hub copies of MMLU store it
    {"question": "Largest planet?", "choices": ["Mars", "Venus", "Jupiter"], "answer": "Jupiter"},  # an option's text
]


def write(path: Path) -> Path:
    """ROWS in the file kind ``path``'s suffix names (CSV: options in columns A, B, C)."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    elif path.suffix == ".csv":
        lines = ["question,A,B,C,answer"] + [
            ",".join([row["question"], *row["choices"], str(row["answer"])]) for row in ROWS]
        path.write_text("\n".join(lines) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([{**row, "answer": str(row["answer"])} for row in ROWS]), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_multiple_choice_rows_load_from_every_file_kind(tmp_path: Path, suffix: str) -> None:
    rows = sf.load_problems(write(tmp_path / f"mc{suffix}"), answer_kind="choice")
    assert [r["answer"] for r in rows] == ["B", "B", "C"]  # a letter, an index (1, or "1" in CSV), an option's text
    assert rows[0]["choices"] == ["Rome", "Paris", "Oslo"]
    assert rows[0]["problem"] == "Capital of France?\n\n(A) Rome\n(B) Paris\n(C) Oslo"


def test_multiple_choice_rows_load_from_a_hugging_face_dataset_directory(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_list([{**row, "answer": row["answer"] if isinstance(row["answer"], str) else "B"}
                                for row in ROWS]).save_to_disk(str(tmp_path / "mc"))
    rows = sf.load_problems(tmp_path / "mc", answer_kind="choice", split="test")
    assert [r["answer"] for r in rows] == ["B", "B", "C"]


def test_bad_multiple_choice_rows_name_the_file_and_row(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"question": "?", "choices": ["a", "b"], "answer": "A"})
    bad.write_text(good + "\n\n" + json.dumps({"question": "?", "choices": ["a", "b"], "answer": "Z"}) + "\n")
    with pytest.raises(sf.DatasetError, match=r"bad.jsonl:3: answer 'Z' is neither a letter A-B nor the text"):
        sf.load_problems(bad, answer_kind="choice")  # the file's line, blank lines counted
    bad.write_text(good + "\n" + json.dumps(["?", ["a", "b"], "A"]) + "\n")
    with pytest.raises(sf.DatasetError, match=r"bad.jsonl:2: a row is a JSON object, got list"):
        sf.load_problems(bad, answer_kind="choice")
    with pytest.raises(sf.DatasetError, match=r"x row 1: a multiple-choice row is an object .* got list"):
        choice_rows([{"question": "?", "choices": ["a", "b"], "answer": "A"}, ["?", ["a", "b"], "A"]], "x")
    csv_file = tmp_path / "bad.csv"
    csv_file.write_text("question,A,B,answer\n2+2?,3,4,B\n3+3?,6,7,Q\n")
    with pytest.raises(sf.DatasetError, match=r"bad.csv:3: answer 'Q'"):
        sf.load_problems(csv_file, answer_kind="choice")
    with pytest.raises(sf.DatasetError, match="row 0: a multiple-choice row needs at least two options"):
        choice_rows([{"question": "?", "choices": ["only"], "answer": "A"}], "x")
    with pytest.raises(sf.DatasetError, match="row 0: answer index 5 is not one of the 2 options"):
        choice_rows([{"question": "?", "choices": ["a", "b"], "answer": 5}], "x")
    with pytest.raises(sf.DatasetError, match="row 1: no question"):
        choice_rows([{"question": "?", "choices": ["a", "b"], "answer": "A"}, {"choices": ["a", "b"], "answer": 0}],
                    "x")
    assert format_choices("Q", ["a", "b"], "{options}\n{question}") == "(A) a\n(B) b\nQ"
    assert "{options}" in CHOICES_TEMPLATE


def test_an_evaluation_on_multiple_choice_passes_the_options_and_records_its_kind(tmp_path: Path) -> None:
    """The model answers with option texts: read as letters through the row's options, scored against them."""

    @sf.graph
    def sc(problem):
        return sf.vote(sf.sample("{problem}\n{answer_format}", model="m", n=3))

    def model(request: Any) -> str:
        prompt = request.last_content
        assert prompt.endswith("Answer: X")  # the choice kind's instruction
        return {"Capital": "The answer is Paris.", "2+2": "Answer: (B)", "planet": "\\boxed{Mars}"}[
            next(k for k in ("Capital", "2+2", "planet") if k in prompt)]

    rows = choice_rows(ROWS, "rows")
    store = sf.Store(tmp_path / "e.db")
    report = evaluate(sc.build(), rows, {"m": ScriptedBackend(model)}, name="mc", store=store, answer_kind="choice")
    assert [o.correct for o in report.outcomes] == [True, True, False]
    assert store.evaluation("mc").settings["answer_kind"] == "choice"
    reread = sf.evaluation.load_report(store, "mc")  # scored again by the recorded kind
    assert [o.correct for o in reread.outcomes] == [True, True, False]
    store.close()


def scaffold(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"OPENAI_API_KEY": "sk-test-0123456789"}
    return subprocess.run([sys.executable, "-m", "scaffold", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def chooser(request: Any) -> str:
    """A stand-in API model: picks the option whose text is the longest word, in varied phrasings."""
    options = re.findall(r"^\(([A-J])\) (.+)$", request.last_content, re.MULTILINE)
    letter = max(options, key=lambda o: len(o[1]))[0]
    return ["The answer is ({}).", "**Answer: {}**", "I'll go with {}."][request.choice % 3].format(letter)


@pytest.mark.slow
def test_the_cli_evaluates_multiple_choice_and_runs_one_question_over_http(tmp_path: Path) -> None:
    data, db = write(tmp_path / "mc.csv"), tmp_path / "runs.db"
    with OpenAIServer(policy=chooser) as server:
        done = scaffold("--store", str(db), "eval", "self_consistency", "-p", "n=3", "--data", str(data),
                        "--answer-kind", "choice", "--model", "openai/gpt-4o-mini", "--api-base", server.base_url,
                        "--json", "--no-progress")
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        assert report["accuracy"]["value"] == pytest.approx(2 / 3)  # "Paris" and "Jupiter" are the longest
        assert report["settings"]["answer_kind"] == "choice"
        one = scaffold("--store", str(db), "run", "self_consistency", "-p", "n=3", "--problem", "Which is a fruit?",
                       "--choice", "car", "--choice", "banana", "--answer", "banana", "--model", "openai/gpt-4o-mini",
                       "--api-base", server.base_url, "--json")
    assert one.returncode == 0, one.stderr[-3000:]
    ran = json.loads(one.stdout)
    assert ran["answer"] == "B" and ran["correct"] is True
    bad = scaffold("eval", "self_consistency", "--answer-kind", "choice")
    assert bad.returncode == 2 and "--answer-kind choice needs --data" in bad.stderr
