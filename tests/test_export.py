"""Credited traces exported for training elsewhere (TRL's datasets, verl's Parquet): real samples of the tiny model,
credited, exported, and checked against the batch the trainer itself would train on."""

from __future__ import annotations

from typing import Any

import pytest

import scaffold as sf
from scaffold.backends._transformers import TransformersBackend
from trainers.batch import collate
from trainers.credit import assign_credit
from trainers.export import export_rows, to_dataset, to_tinker_data, to_verl_parquet


@sf.graph
def group(problem, *, n: int = 4):
    return sf.vote(sf.sample("{problem}", model="m", n=n, logprobs=True, params={"max_tokens": 6}))


@pytest.fixture(scope="module")
def credited(tiny_model_dir: Any) -> tuple[list[Any], Any]:
    backend = TransformersBackend(tiny_model_dir)
    result = group.run_sync({"problem": "what is two plus two?"}, models={"m": backend}, store=None, seed=3)
    samples = [t for t in result.traces if t.kind is sf.TraceKind.MODEL]
    rewards = {t.id: float(i % 2) for i, t in enumerate(samples)}  # two right, two wrong: non-zero advantages
    items = assign_credit(result.traces, rewards, scheme="grpo")
    yield items, backend.tokenizer
    backend.close()


def test_rows_hold_what_the_trainer_trains_on(credited):
    items, tokenizer = credited
    rows = export_rows(items, tokenizer)
    batch = collate(items, tokenizer, pad_id=0)
    assert len(rows) == len(items) == 4
    for i, (row, item) in enumerate(zip(rows, items)):
        length = len(row["input_ids"])
        assert batch.input_ids_BT[i, :length].tolist() == row["input_ids"]  # the sequence the trainer uses
        assert batch.completion_mask_BT[i, :length].tolist() == [float(v) for v in row["loss_mask"]]
        assert row["completion_ids"] == list(item.trace.token_ids)  # the sampled ids, not re-tokenised
        assert sum(row["loss_mask"]) == len(row["completion_ids"]) == len(row["sampling_logprobs"])
        assert row["advantages"][-1] == pytest.approx(item.advantage) and row["advantages"][0] == 0.0
    assert {round(r["advantage"], 6) for r in rows} == {round(i.advantage, 6) for i in items}
    assert any(r["advantage"] > 0 for r in rows) and any(r["advantage"] < 0 for r in rows)


def test_a_dataset_and_verl_parquet(credited, tmp_path):
    import pyarrow.parquet as pq
    items, tokenizer = credited
    rows = export_rows(items, tokenizer)
    dataset = to_dataset(rows)
    assert len(dataset) == 4 and dataset[0]["input_ids"] == rows[0]["input_ids"]
    assert set(dataset.column_names) >= {"prompt_ids", "completion_ids", "loss_mask", "advantages", "role"}
    table = pq.read_table(to_verl_parquet(rows, tmp_path / "verl" / "credited.parquet")).to_pylist()
    assert [r["responses"] for r in table] == [row["completion_ids"] for row in rows]
    assert all(len(r["advantages"]) == len(r["response_mask"]) == len(r["responses"]) for r in table)
    assert all(r["input_ids"] == r["prompts"] + r["responses"] for r in table)


def test_an_output_without_sampled_ids_is_refused(credited):
    items, tokenizer = credited
    outside = sf.Trace(id="r/given#0", run_id="r", node="given", index=0, kind=sf.TraceKind.EXTERNAL, text="4")
    from trainers.types import Credited

    with pytest.raises(ValueError, match="no request or no recorded token ids"):
        export_rows([Credited(outside, 1.0)], tokenizer)


def test_tinker_data_align_targets_logprobs_and_advantages(credited):
    from tinker import types
    items, tokenizer = credited
    rows = export_rows(items, tokenizer)
    data = to_tinker_data(rows)
    assert len(data) == 4 and all(isinstance(d, types.Datum) for d in data)
    for datum, row in zip(data, rows):
        targets = datum.loss_fn_inputs["target_tokens"].data
        advantages = datum.loss_fn_inputs["advantages"].data
        assert datum.model_input.length == len(row["input_ids"]) - 1 == len(targets) == len(advantages)
        assert list(targets) == row["input_ids"][1:]
        start = len(row["prompt_ids"]) - 1  # the first target that is a sampled token
        assert list(targets[start:]) == row["completion_ids"]
        assert all(a == 0.0 for a in advantages[:start])
        assert advantages[start:] == pytest.approx([row["advantage"]] * len(row["completion_ids"]))
        assert datum.loss_fn_inputs["logprobs"].data[start:] == pytest.approx(row["sampling_logprobs"])
