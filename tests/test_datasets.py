"""Problem sets by name: the shipped sets load offline from the package, a path still works, a hub name goes
through ``datasets``, and a name that resolves nowhere is one typed error listing every attempt."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import scaffold as sf
from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-stand-in-key-0123456789"
EXPECTED_ROWS = {"math500": 500, "gsm8k": 1319, "math_train": 7464}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_a_shipped_set_loads_by_name_with_the_rows_it_lists(name: str) -> None:
    """Every shipped set loads by name, offline, with as many rows as its listing says, each with a non-empty
    problem and answer string, unique ids and its own name as ``source``."""
    rows = sf.load_problems(name)
    assert len(rows) == sf.DATASETS[name].rows == EXPECTED_ROWS[name]
    assert all(isinstance(r["problem"], str) and r["problem"].strip() for r in rows)
    assert all(isinstance(r["answer"], str) and r["answer"].strip() for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    assert {r["source"] for r in rows} == {name}


def test_math500_starts_with_its_known_first_problem_and_limit_keeps_the_first_rows() -> None:
    """The first MATH-500 row is test/precalculus/807.json; ``limit`` returns the first rows, in order."""
    first_three = sf.load_problems("math500", limit=3)
    assert len(first_three) == 3
    assert first_three[0]["id"] == "test/precalculus/807.json"
    assert first_three[0]["answer"] == r"\left( 3, \frac{\pi}{2} \right)"
    assert first_three == sf.load_problems("math500")[:3]
    with pytest.raises(sf.DatasetError, match="limit must be at least 1"):
        sf.load_problems("math500", limit=0)


def test_gsm8k_test_is_an_alias_and_a_shipped_set_has_one_split() -> None:
    """``gsm8k_test`` is the same set as ``gsm8k``; asking a shipped set for a split it is not is an error."""
    assert sf.load_problems("gsm8k_test", limit=5) == sf.load_problems("gsm8k", limit=5)
    assert sf.load_problems("math_train", split="train", limit=1)[0]["id"] == "math-train-0"
    with pytest.raises(sf.DatasetError, match="gsm8k: the shipped set is the test split only"):
        sf.load_problems("gsm8k", split="train")


def test_a_path_still_loads_and_a_path_object_is_never_a_shipped_name(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSONL path loads as before (str or Path, with other field names); a shipped name wins over a file of the
    same name in the working directory, which a ``Path`` object still reaches."""
    data = tmp_path / "mine.jsonl"
    data.write_text('{"id": "a", "question": "1+1", "solution": 2}\n\n{"id": "b", "question": "2+3", "solution": 5}\n')
    expected = [("1+1", "2"), ("2+3", "5")]
    for source in (data, str(data)):
        rows = sf.load_problems(source, problem_key="question", answer_key="solution")
        assert [(r["problem"], r["answer"]) for r in rows] == expected
    monkeypatch.chdir(tmp_path)
    (tmp_path / "math500").write_text('{"problem": "local", "answer": "1"}\n')
    assert sf.load_problems("math500", limit=1)[0]["id"] == "test/precalculus/807.json"
    assert sf.load_problems(Path("math500"))[0]["problem"] == "local"
    with pytest.raises(sf.DatasetError, match="no such dataset file or directory"):
        sf.load_problems(Path("absent.jsonl"))


def test_a_malformed_row_of_a_file_names_the_file_and_line(tmp_path: Path) -> None:
    """A row without an answer fails before anything runs, naming its file and line."""
    data = tmp_path / "bad.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n')
    with pytest.raises(sf.DatasetError, match=re.escape(f"{data}:2: the row has no 'answer'")):
        sf.load_problems(str(data))


def test_a_local_hugging_face_dataset_directory_loads_through_datasets(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing directory is a local Hugging Face dataset: ``datasets`` reads it (offline), split ``test``."""
    datasets = pytest.importorskip("datasets")
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "hubset"
    folder.mkdir()
    (folder / "test.jsonl").write_text('{"problem": "1+1", "answer": 2}\n{"problem": "2+3", "answer": 5.0}\n')
    rows = sf.load_problems(str(folder))
    assert [(r["problem"], r["answer"]) for r in rows] == [("1+1", "2"), ("2+3", "5")]


def test_a_competition_set_without_the_datasets_package_says_where_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """aime25 does not ship: without ``datasets`` the one-line error lists the three attempts, names the hub id,
    whose problems they are, and how to load them (hub access, or a JSONL file)."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(sf.DatasetError) as caught:
        sf.load_problems("aime25")
    message = str(caught.value)
    assert "\n" not in message
    assert "not a shipped set (math500, gsm8k, math_train)" in message
    assert "no file or directory 'aime25'" in message
    assert "MathArena/aime_2025: loading a Hugging Face dataset needs the datasets package" in message
    assert "belong to the MAA and do not ship" in message and "pip install scaffold-sdk[hub]" in message
    assert "JSONL file of problem/answer rows" in message


OFFLINE_SCRIPT = """
import json, sys
import scaffold as sf
out = {}
for name in sys.argv[1:]:
    try:
        sf.load_problems(name)
        out[name] = None
    except sf.DatasetError as error:
        out[name] = {"message": str(error), "value_error": isinstance(error, ValueError)}
print(json.dumps(out))
"""


def test_names_that_resolve_nowhere_list_every_attempt_with_the_hub_offline(tmp_path: Path) -> None:
    """With the hub unreachable (offline mode, so nothing can hang): a hub-shaped name, a bare unknown name and
    known competition names each raise one typed, one-line DatasetError saying what the shipped sets, the path
    and the hub attempt found; a competition name also says where to get its problems."""
    pytest.importorskip("datasets")
    names = ["no-such-org/no-such-set", "no-such-set", "aime24", "hmmt_feb25", "data/missing.jsonl"]
    env = {**os.environ, **OFFLINE, "HF_HOME": str(tmp_path / "hf-home")}
    done = subprocess.run([sys.executable, "-c", OFFLINE_SCRIPT, *names], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    errors: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(errors[name] is not None and errors[name]["value_error"] for name in names), errors
    messages = {name: errors[name]["message"] for name in names}
    for name, message in messages.items():
        assert "\n" not in message
        assert message.startswith(f"no dataset {name!r}: not a shipped set (math500, gsm8k, math_train); "
                                  f"no file or directory {name!r}; ")
    assert "no-such-org/no-such-set: cannot load split 'test' from the Hugging Face hub" in \
        messages["no-such-org/no-such-set"]
    assert "not a Hugging Face dataset (neither a known set" in messages["no-such-set"]
    assert "not a Hugging Face dataset" in messages["data/missing.jsonl"]  # a file path is not tried on the hub
    assert "HuggingFaceH4/aime_2024: cannot load split 'train' from the Hugging Face hub" in messages["aime24"]
    assert "AIME 2024 (I and II) problems belong to the MAA" in messages["aime24"]
    assert "MathArena/hmmt_feb_2025: cannot load split 'train'" in messages["hmmt_feb25"]
    assert "belong to the HMMT" in messages["hmmt_feb25"]


def test_the_shipped_files_are_package_resources_listed_in_pyproject_and_the_provenance() -> None:
    """Each shipped file is found through importlib.resources (as from an installed wheel), the package-data
    globs of pyproject.toml include it and PROVENANCE.md, and PROVENANCE.md's table gives its rows and commit."""
    data = resources.files("scaffold") / "data"
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["scaffold"]
    provenance = (data / "PROVENANCE.md").read_text(encoding="utf-8")
    for shipped in sf.DATASETS.values():
        assert (data / shipped.file).is_file()
        assert any(fnmatch.fnmatch(f"data/{shipped.file}", pattern) for pattern in globs), globs
        repository, commit = shipped.source.split("@")
        row = next(line for line in provenance.splitlines() if line.startswith(f"| `{shipped.name}` |"))
        assert f"`{shipped.file}` | {shipped.rows} | {shipped.split} | {repository} @ `{commit}`" in row
        assert row.rstrip().endswith(f"| {shipped.license} |")
    assert any(fnmatch.fnmatch("data/PROVENANCE.md", pattern) for pattern in globs)
    assert "AIME" in provenance and "are not shipped" in provenance.replace("\n", " ")


def test_no_source_file_names_a_path_outside_the_repository() -> None:
    """No file of the package, the plugins, the examples or the benchmarks points at data outside the repository
    (the shipped sets are loaded by name instead)."""
    outside = re.compile(r"\.\./shared|shared/data|/work/" + "shared")
    found = [str(path.relative_to(ROOT))
             for folder in ("scaffold", "graphs", "trainers", "examples", "benchmarks")
             for path in (ROOT / folder).rglob("*")
             if path.suffix in (".py", ".sh", ".md", ".toml", ".yaml", ".txt") and outside.search(path.read_text())]
    assert found == []


def test_the_cli_lists_the_sets_and_its_dataset_options_name_them() -> None:
    """`scaffold data list` shows each shipped set with its rows and license and each hub set with its id; the
    help of `eval --data` and `train --data` names the shipped sets."""
    from scaffold.cli import main

    runner = CliRunner()
    listed = runner.invoke(main, ["data", "list"])
    assert listed.exit_code == 0, listed.output
    assert re.search(r"math500\s+500 rows\s+test\s+MIT", listed.output)
    assert re.search(r"gsm8k\s+1319 rows\s+test\s+MIT", listed.output)
    assert "aime24       HuggingFaceH4/aime_2024 [train]" in listed.output
    as_json = json.loads(runner.invoke(main, ["data", "list", "--json"]).output)
    assert [d["name"] for d in as_json["shipped"]] == ["math500", "gsm8k", "math_train"]
    assert {d["hub"] for d in as_json["hub"]} == {"HuggingFaceH4/aime_2024", "MathArena/aime_2025",
                                                  "MathArena/hmmt_feb_2025", "math-ai/amc23"}
    eval_help = runner.invoke(main, ["eval", "--help"]).output
    train_help = runner.invoke(main, ["train", "--help"]).output
    assert "math500, gsm8k, math_train" in eval_help and "math_train" in train_help
    assert "shared" not in eval_help + train_help


def test_scaffold_eval_takes_a_shipped_set_by_name(tmp_path: Path) -> None:
    """`scaffold eval --data math500 --limit 3` against a stand-in model that knows the answers: 3 problems of
    math500 scored right, recorded under the dataset name math500-n3."""
    rows = sf.load_problems("math500", limit=3)

    def knows(request: Any) -> str:
        answer = next(r["answer"] for r in rows if r["problem"] in request.last_content)
        return f"So the answer is \\boxed{{{answer}}}"

    with OpenAIServer(policy=knows) as server:
        done = subprocess.run(
            [sys.executable, "-m", "scaffold", "--store", str(tmp_path / "r.db"), "eval", "single_sample", "--data",
             "math500", "--limit", "3", "--model", "openai/stand-in", "--api-base", server.base_url, "--json",
             "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["finished"] == 3 and report["accuracy"]["value"] == 1.0
    assert report["dataset"] == "math500-n3" and report["settings"]["data"] == "math500"
