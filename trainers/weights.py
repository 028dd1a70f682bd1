"""New policy weights on their way to rollout engines, and the policy version a rollout was sampled with.

After each update the trainer sends a :class:`WeightUpdate` to every rollout engine:

- ``"full"``: every weight of the policy under the base model's names, LoRA deltas merged in
  (:meth:`~trainers.Policy.merged_weights`); the engine copies them in place
  (``update_weights``).
- ``"lora"``: only the adapter's tensors (peft's names) and its configuration, a small fraction of
  the model. An engine that serves adapters (a ``VLLMBackend`` built with ``enable_lora=True``)
  loads them as an adapter; any other engine merges them into the base weights it read once from
  the model directory (``W + B @ A * alpha / r``) and copies the merged layers in.

Every update carries the policy's version (its optimiser steps); the engine labels the weights
with it, so each completion records which version sampled it (``metadata["weight_versions"]``),
and :func:`rollout_version` reads it back from a recorded trace.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from scaffold._types import Trace

if TYPE_CHECKING:
    import torch

    from trainers.policy import Policy

UpdateKind = Literal["full", "lora"]


@dataclass(frozen=True)
class WeightUpdate:
    """The policy's weights at one version, as sent to rollout engines (built by :func:`weight_update`).

    Examples:
        >>> WeightUpdate(version=3, kind="full", tensors={}).version
        3
    """

    version: int
    """The policy's optimiser steps when the weights were taken."""
    kind: UpdateKind
    tensors: Mapping[str, torch.Tensor]
    """``"full"``: base-model names → tensors; ``"lora"``: the adapter's tensors under peft's names."""
    lora_config: Mapping[str, Any] = field(default_factory=dict)
    """``"lora"`` only: the adapter's ``adapter_config.json``."""

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data the update carries."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def weight_update(policy: Policy, kind: UpdateKind | Literal["auto"] = "auto") -> WeightUpdate:
    """The policy's current weights as a :class:`WeightUpdate` (tensors on the CPU, detached).

    ``"auto"`` sends the adapter of a LoRA policy and every weight otherwise; ``"lora"`` needs a LoRA policy.

    Examples:
        >>> weight_update(policy).kind  # doctest: +SKIP
        'full'
    """
    lora = policy.config.lora is not None
    chosen = ("lora" if lora else "full") if kind == "auto" else kind
    if chosen not in ("full", "lora"):
        raise ValueError(f"a weight update is 'full', 'lora' or 'auto', not {kind!r}")
    if chosen == "lora" and not lora:
        raise ValueError("a 'lora' weight update needs a policy trained with LoRA (PolicyConfig(lora=...))")
    if chosen == "full":
        return WeightUpdate(policy.steps_done, "full", {n: t.detach().to("cpu") for n, t in
                                                        policy.merged_weights().items()})
    from peft import get_peft_model_state_dict

    tensors = {n: t.detach().to("cpu") for n, t in get_peft_model_state_dict(policy.model).items()}
    config = policy.model.peft_config["default"].to_dict()
    return WeightUpdate(policy.steps_done, "lora", tensors, json.loads(json.dumps(config, default=_jsonable)))


def apply_update(engine: Any, update: WeightUpdate, base: LoraBase) -> int:
    """Bring ``engine`` to ``update`` (see the module docstring for how) and return its new weights version.

    ``engine`` needs ``update_weights(weights, version=...)`` (``TransformersBackend``, ``VLLMBackend`` or
    any engine with that method); ``base`` caches the base weights a LoRA merge starts from.
    """
    if not hasattr(engine, "update_weights"):
        raise TypeError(f"a {type(engine).__name__} cannot take new weights: it has no update_weights")
    if update.kind == "full":
        return int(engine.update_weights(update.tensors, version=update.version))
    if getattr(engine, "enable_lora", False):
        directory = base.adapter_dir()
        _save_adapter(directory, update)
        engine.load_lora(directory, "policy")
        return int(engine.update_weights([], version=update.version))
    return int(engine.update_weights(base.merge(update), version=update.version))


class LoraBase:
    """The base weights of the layers a LoRA adapter changes, read once from the model directory.

    Examples:
        >>> LoraBase("/models/pocket").model_dir
        '/models/pocket'
    """

    def __init__(self, model_dir: str | os.PathLike[str]) -> None:
        self.model_dir = os.fspath(model_dir)
        self.weights: dict[str, torch.Tensor] = {}
        self._adapter_dir: str | None = None

    def merge(self, update: WeightUpdate) -> dict[str, torch.Tensor]:
        """``W + B @ A * scaling`` for every layer the adapter touches, under the base model's names."""
        config = update.lora_config
        rank = int(config["r"])
        scaling = float(config["lora_alpha"]) / (math.sqrt(rank) if config.get("use_rslora") else rank)
        layers = {name.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
                  for name in update.tensors if name.endswith(".lora_A.weight")}
        missing = [f"{layer}.weight" for layer in layers if f"{layer}.weight" not in self.weights]
        if missing:
            self.weights.update(_read_weights(self.model_dir, missing))
        merged = {}
        for layer in sorted(layers):
            a = update.tensors[f"base_model.model.{layer}.lora_A.weight"]
            b = update.tensors[f"base_model.model.{layer}.lora_B.weight"]
            delta = b.float() @ a.float() * scaling
            if config.get("fan_in_fan_out"):
                delta = delta.T
            weight = self.weights[f"{layer}.weight"]
            merged[f"{layer}.weight"] = (weight.float() + delta).to(weight.dtype)
        return merged

    def adapter_dir(self) -> str:
        """A private directory the adapter files are written to (kept for this object's life)."""
        if self._adapter_dir is None:
            self._adapter_dir = tempfile.mkdtemp(prefix="scaffold-rollout-adapter-")
        return self._adapter_dir


def rollout_version(trace: Trace) -> int | None:
    """The policy version a recorded trace was sampled with: the oldest of its ``weight_versions``.

    ``None`` when its engine did not report one (or a label is not a number).

    Examples:
        >>> t = Trace(id="r/s#0", run_id="r", node="s", index=0, metadata={"weight_versions": [["4", 0, 9]]})
        >>> rollout_version(t)
        4
    """
    spans = trace.metadata.get("weight_versions") if trace.metadata else None
    if not spans:
        return None
    try:
        return min(int(span[0]) for span in spans)
    except (TypeError, ValueError, IndexError):
        return None


def _save_adapter(directory: str, update: WeightUpdate) -> None:
    from safetensors.torch import save_file

    path = Path(directory)
    save_file({n: t.contiguous() for n, t in update.tensors.items()}, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps(update.lora_config))


def _read_weights(model_dir: str, names: list[str]) -> dict[str, torch.Tensor]:
    """Tensors ``names`` from the model directory's safetensors files (one file or an index of shards)."""
    from safetensors import safe_open

    directory = Path(model_dir)
    index = directory / "model.safetensors.index.json"
    if index.exists():
        where = json.loads(index.read_text())["weight_map"]
    else:
        where = {name: "model.safetensors" for name in names}
    missing = [name for name in names if name not in where]
    if missing:
        raise ValueError(f"{model_dir} has no weights named {missing[:4]}")
    found: dict[str, torch.Tensor] = {}
    for file in sorted({where[name] for name in names}):
        with safe_open(str(directory / file), framework="pt") as opened:
            keys = set(opened.keys())
            for name in names:
                if where[name] == file:
                    if name not in keys:
                        raise ValueError(f"{directory / file} has no tensor {name}")
                    found[name] = opened.get_tensor(name)
    return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)
