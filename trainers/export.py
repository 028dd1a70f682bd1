"""Credited traces exported for training elsewhere: every trained trace with its token ids, loss mask and
per-token advantage, after Scaffold's credit assignment (set-level SPIRAL credit included, which other RL
stacks cannot compute themselves).

- :func:`export_rows` — plain rows (one per credited trace): ``prompt_ids``, ``completion_ids``, ``input_ids``
  (prompt then completion), ``loss_mask`` (1 on completion tokens), ``advantages`` (the trace's advantage on
  each completion token, 0 on the prompt), ``sampling_logprobs``, and the trace's id, run, node, role, group,
  reward and scalar advantage.
- :func:`to_dataset` — those rows as a Hugging Face ``datasets.Dataset`` (what TRL's trainers and data
  collators consume).
- :func:`to_tinker_data` — Tinker ``Datum`` objects built with the ``tinker`` SDK's own types (no network): the
  sequence but its last token as the model input, the next tokens as ``target_tokens``, and ``logprobs`` (the
  sampling logprobs) and ``advantages`` aligned with the targets, 0 on the prompt: what Tinker's
  importance-sampling and PPO losses read.
- :func:`to_verl_parquet` — a Parquet file of verl's per-sample tensors as lists: ``input_ids``,
  ``attention_mask``, ``position_ids``, ``prompts``, ``responses``, ``response_mask``, ``advantages`` (per
  response token) and ``old_log_probs``, with ``uid`` (the group the advantage was centred in), ``role`` and
  ``trace_id``.

The prompt ids are the ones the transformers backend encoded (:func:`trainers.batch.prompt_ids`), and the
completion ids are the recorded sampled ids, never re-tokenised, so what another stack trains on is what was
sampled. Needs ``datasets`` (:func:`to_dataset`), ``tinker`` (:func:`to_tinker_data`) or ``pyarrow``
(:func:`to_verl_parquet`): the ``export`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainers.batch import prompt_ids
from trainers.types import Credited

__all__ = ["export_rows", "to_dataset", "to_tinker_data", "to_verl_parquet"]


def export_rows(items: Sequence[Credited], tokenizer: Any) -> list[dict[str, Any]]:
    """One row per credited trace: its prompt and completion ids, loss mask and per-token advantages.

    A trace without a request or recorded token ids (an imported output, a rule) cannot be exported for
    training: :class:`ValueError` names it.
    """
    rows = []
    for item in items:
        trace = item.trace
        if trace.request is None or not trace.token_ids:
            raise ValueError(f"trace {trace.id} has no request or no recorded token ids: it cannot be exported "
                             "for training (only model calls that recorded their sampled ids can)")
        prompt = list(prompt_ids(tokenizer, trace.request))
        completion = list(trace.token_ids)
        rows.append({
            "trace_id": trace.id, "run_id": trace.run_id, "node": trace.node, "role": item.role,
            "group": item.group, "reward": item.reward, "advantage": float(item.advantage),
            "prompt_ids": prompt, "completion_ids": completion, "input_ids": prompt + completion,
            "loss_mask": [0] * len(prompt) + [1] * len(completion),
            "advantages": [0.0] * len(prompt) + [float(item.advantage)] * len(completion),
            "sampling_logprobs": None if trace.logprobs is None else [float(v) for v in trace.logprobs],
        })
    return rows


def to_dataset(rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as a Hugging Face ``datasets.Dataset`` (TRL reads it as it is)."""
    try:
        import datasets
    except ImportError:
        raise ImportError("exporting a dataset needs the datasets package: pip install 'scaffold-sdk[export]'") \
            from None
    return datasets.Dataset.from_list([dict(row) for row in rows])


def to_tinker_data(rows: Sequence[dict[str, Any]]) -> list[Any]:
    """The rows as Tinker ``Datum`` objects (``tinker.types``), validated by the SDK's own models; nothing is sent."""
    try:
        from tinker import types
    except ImportError:
        raise ImportError("Tinker data needs the tinker package: pip install 'scaffold-sdk[export]'") from None
    data = []
    for row in rows:
        tokens = row["input_ids"]
        prompt = len(row["prompt_ids"])
        sampled = row["sampling_logprobs"] or [0.0] * len(row["completion_ids"])
        # target i is token i + 1: the prompt's targets (but its last) carry no loss, the completion's do
        logprobs = [0.0] * (prompt - 1) + [float(v) for v in sampled]
        advantages = [0.0] * (prompt - 1) + [float(row["advantage"])] * len(row["completion_ids"])
        data.append(types.Datum(
            model_input=types.ModelInput.from_ints(tokens=list(tokens[:-1])),
            loss_fn_inputs={"target_tokens": types.TensorData(data=list(tokens[1:]), dtype="int64"),
                            "logprobs": types.TensorData(data=logprobs, dtype="float32"),
                            "advantages": types.TensorData(data=advantages, dtype="float32")}))
    return data


def to_verl_parquet(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write the rows as verl's per-sample fields to a Parquet file; returns its path."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("writing Parquet needs pyarrow: pip install 'scaffold-sdk[export]'") from None
    columns: dict[str, list[Any]] = {key: [] for key in (
        "uid", "trace_id", "role", "input_ids", "attention_mask", "position_ids", "prompts", "responses",
        "response_mask", "advantages", "old_log_probs")}
    for row in rows:
        prompt, response = row["prompt_ids"], row["completion_ids"]
        length = len(prompt) + len(response)
        columns["uid"].append(row["group"] or row["run_id"])
        columns["trace_id"].append(row["trace_id"])
        columns["role"].append(row["role"])
        columns["input_ids"].append(prompt + response)
        columns["attention_mask"].append([1] * length)
        columns["position_ids"].append(list(range(length)))
        columns["prompts"].append(prompt)
        columns["responses"].append(response)
        columns["response_mask"].append([1] * len(response))
        columns["advantages"].append([row["advantage"]] * len(response))
        columns["old_log_probs"].append(row["sampling_logprobs"])
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), target)
    return target
