"""The trained model: LoRA or full fine-tuning, one optimiser step per call, exact checkpoints, live rollouts.

:class:`Policy` owns a Hugging Face causal LM (float32 on the CPU), its tokenizer, an AdamW optimiser
and, when the KL penalty is on, a frozen reference copy of the starting weights. :meth:`Policy.step`
is the update: collate the credited traces, then per micro-batch score the recorded tokens, take
the clipped loss and back-propagate, then clip the gradient norm and step. Micro-batch losses are
weighted by their share of the step's tokens (or sequences), so the accumulated gradient equals
the gradient of the whole batch's loss however it is split.

Rollouts always see the current weights: :meth:`Policy.backend` is a
:class:`~scaffold.TransformersBackend` over the live model object (the peft-wrapped one with LoRA),
and :meth:`Policy.refresh` copies the weights into a separate engine (another transformers model, or
a :class:`~scaffold.backends._vllm.VLLMBackend`: the adapter through ``load_lora`` when it was built
with ``enable_lora``, else the merged weights through ``update_weights``).

Needs the ``train`` extra (torch, transformers, peft for LoRA); this module imports without it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffold._json import to_json
from scaffold.backends._transformers import quiet_progress
from trainers.batch import collate
from trainers.loss import Normalise, k3, policy_loss, token_logprobs
from trainers.types import Credited, StepMetrics, TrainBatch

if TYPE_CHECKING:
    import torch

    from scaffold.backends._transformers import TransformersBackend

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a Llama/Qwen-style decoder: LoRA's default targets."""
CHECKPOINT_FILE = "policy.json"


@dataclass(frozen=True, kw_only=True)
class LoraSettings:
    """A peft LoRA adapter on the policy's linear layers."""

    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """How :class:`Policy` updates its weights (AdamW, PPO-style clipping, optional KL to the start)."""

    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_accumulation: int = 1
    """At least this many micro-batches per optimiser step (their gradients are summed)."""
    micro_batch_size: int | None = None
    """At most this many sequences per forward/backward pass (``None``: no cap)."""
    max_grad_norm: float | None = 1.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the starting weights; above 0 a frozen reference model is kept."""
    measure_kl: bool = False
    """Keep the reference model and report the KL to it (overall and per role) even when ``kl_coef`` is 0."""
    measure_kl_every: int = 1
    """When the KL is only measured (``kl_coef`` 0), score the reference on every this-many-th trace only
    (an unbiased estimate at a fraction of the cost; the reference forward pass is a third of an update's)."""
    normalise: Normalise = "token"
    lora: LoraSettings | None = None
    """``None``: full fine-tuning."""
    max_length: int | None = None
    """Cap on prompt + completion tokens per sequence (see :func:`trainers.batch.collate`)."""
    seed: int = 0
    """Seeds torch's global generator at construction (LoRA initialisation, dropout)."""
    device: str = "cpu"
    """Where the policy (and its reference) live and train: ``"cpu"``, ``"cuda"``, ``"cuda:1"``..."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicyConfig:
        data = dict(data)
        lora = data.pop("lora")
        if lora is not None:
            lora = LoraSettings(**{**lora, "target_modules": tuple(lora["target_modules"])})
        return cls(**{**data, "betas": tuple(data["betas"]), "lora": lora})


@dataclass
class _Totals:
    """Sums over the micro-batches of one step."""

    loss: float = 0.0
    entropy: float = 0.0
    kl: float = 0.0
    clipped: float = 0.0
    ratio: float = 0.0
    kl_tokens: float = 0.0
    roles: dict[str, list[float]] = field(default_factory=dict)
    """Per role: [completion tokens, summed token entropy, tokens the KL was measured on, summed token k3 KL]."""

    def add_entropy(self, micro: TrainBatch, entropy_BT: Any) -> None:
        self._add_per_role(micro, entropy_BT, 0)

    def add_kl(self, micro: TrainBatch, kl_BT: Any) -> None:
        tokens, kl = self._add_per_role(micro, kl_BT, 2)
        self.kl_tokens += tokens
        self.kl += kl

    def _add_per_role(self, micro: TrainBatch, values_BT: Any, slot: int) -> tuple[float, float]:
        """Add each row's completion tokens and summed values to its role's sums at ``slot``; return the totals."""
        tokens = micro.completion_mask_BT.sum(-1).tolist()
        values = (values_BT * micro.completion_mask_BT).sum(-1).tolist()
        for role, t, v in zip(micro.roles, tokens, values):
            sums = self.roles.setdefault(role, [0.0, 0.0, 0.0, 0.0])
            sums[slot] += t
            sums[slot + 1] += v
        return sum(tokens), sum(values)


class Policy:
    """A causal LM being trained: ``step`` on credited traces, ``save``/``resume``, ``backend``/``refresh``/``export``.

    ``model_dir`` is a ``save_pretrained`` directory (the base model); ``config`` the update's
    settings. ``model`` is the live trainable module (peft-wrapped with LoRA), ``tokenizer`` its
    tokenizer, ``reference`` the frozen starting model (only when ``config.kl_coef > 0``),
    ``steps_done`` the optimiser steps taken.

    Examples:
        >>> policy = Policy("path/to/pocket", PolicyConfig(lr=1e-4, lora=LoraSettings()))  # doctest: +SKIP
        >>> metrics = policy.step(credited)  # doctest: +SKIP
    """

    def __init__(self, model_dir: str | os.PathLike[str], config: PolicyConfig | None = None, *,
                 _weights: str | os.PathLike[str] | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir).resolve()
        self.config = config or PolicyConfig()
        torch.manual_seed(self.config.seed)
        random.seed(self.config.seed)
        lora = self.config.lora
        weights = Path(_weights) if _weights is not None else self.model_dir
        base_weights = self.model_dir if lora is not None else weights
        with quiet_progress(enabled=Path(base_weights).is_dir()):
            model: Any = AutoModelForCausalLM.from_pretrained(base_weights, dtype=torch.float32)
        if lora is not None:
            from peft import LoraConfig, PeftModel, get_peft_model

            if _weights is not None:
                model = PeftModel.from_pretrained(model, weights, is_trainable=True)
            else:
                model = get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha,
                                                         lora_dropout=lora.dropout,
                                                         target_modules=list(lora.target_modules)))
        self.model: Any = model.to(self.config.device).train()
        self.tokenizer: Any = AutoTokenizer.from_pretrained(weights)
        self.pad_id: int = next(i for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0)
                                if i is not None)
        self.reference: Any = None
        if self.config.kl_coef > 0 or self.config.measure_kl:
            with quiet_progress(enabled=self.model_dir.is_dir()):
                self.reference = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
            self.reference = self.reference.to(self.config.device).eval()
            self.reference.requires_grad_(False)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                           lr=self.config.lr, betas=self.config.betas,
                                           weight_decay=self.config.weight_decay)
        self.steps_done = 0
        self._adapter_dir: str | None = None

    # -- the update ---------------------------------------------------------------------------------

    def step(self, items: Sequence[Credited], *, fill_logprobs: bool = False) -> StepMetrics:
        """One optimiser step on ``items``: micro-batches, accumulated gradients, clipped norm, AdamW.

        Traces recorded without logprobs raise ``ValueError`` unless ``fill_logprobs``: then the
        current weights supply them (see :func:`trainers.batch.collate`).
        """
        import torch

        started = time.perf_counter()
        config = self.config
        # 1) tensors: prompt + recorded completion, sampling logprobs, advantages
        batch = collate(items, self.tokenizer, pad_id=self.pad_id, max_length=config.max_length,
                        model=self.model if fill_logprobs else None)
        if config.device != "cpu":
            batch = _on_device(batch, config.device)
        total_tokens, total_rows = batch.tokens, len(items)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = _Totals()
        for rows in self._micro_batches(len(items), batch.attention_mask_BT.sum(-1).tolist()):
            micro = _select(batch, rows)
            # 2) score the recorded tokens under the current (and reference) weights
            new_logprobs, entropy = token_logprobs(self.model, micro)
            totals.add_entropy(micro, entropy.detach())
            ref_logprobs = None
            if self.reference is not None:
                every = 1 if config.kl_coef > 0 else config.measure_kl_every
                scored = [j for j, row in enumerate(rows) if row % every == 0]
                if scored:
                    measured_rows = micro if len(scored) == len(rows) else _select(micro, scored)
                    with torch.no_grad():
                        ref_scored, _ = token_logprobs(self.reference, measured_rows)
                        mine = new_logprobs.detach()[scored, : ref_scored.shape[1]]
                        totals.add_kl(measured_rows, k3(ref_scored, mine, measured_rows.completion_mask_BT))
                    ref_logprobs = ref_scored if config.kl_coef > 0 else None
            # 3) the clipped loss, weighted by this micro-batch's share of the step
            loss, measured = policy_loss(new_logprobs, micro.old_logprobs_BT, micro.advantages_B,
                                         micro.completion_mask_BT, clip_low=config.clip_low,
                                         clip_high=config.clip_high, kl_coef=config.kl_coef,
                                         ref_logprobs_BT=ref_logprobs, normalise=config.normalise)
            share = (micro.tokens / max(total_tokens, 1) if config.normalise == "token"
                     else len(rows) / total_rows)
            (loss * share).backward()
            token_share = micro.tokens / max(total_tokens, 1)
            totals.loss += float(loss.detach()) * share
            totals.entropy += float((entropy.detach() * micro.completion_mask_BT).sum()) / max(total_tokens, 1)
            totals.clipped += measured["clip_fraction"] * token_share
            totals.ratio += measured["ratio_mean"] * token_share
        # 4) clip the gradient norm and step
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        elapsed = time.perf_counter() - started
        return _metrics(self.steps_done, items, batch, totals, elapsed,
                        kl=totals.kl / max(totals.kl_tokens, 1) if self.reference is not None else None,
                        extra={"grad_norm": float(norm), "ratio_mean": totals.ratio, "seconds": elapsed,
                               "roles": _role_metrics(items, totals, measured_kl=self.reference is not None)})

    def _micro_batches(self, rows: int, lengths: Sequence[int] | None = None) -> list[list[int]]:
        """Row indices per micro-batch; with ``lengths``, rows of similar length go together (less padding)."""
        size = self.config.micro_batch_size or rows
        count = min(rows, max(self.config.grad_accumulation, -(-rows // size)))
        bounds = [round(i * rows / count) for i in range(count + 1)]
        order = sorted(range(rows), key=lambda i: lengths[i]) if lengths is not None else list(range(rows))
        return [order[bounds[i]:bounds[i + 1]] for i in range(count)]

    # -- checkpoints --------------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write a checkpoint :meth:`resume` continues from exactly: weights (adapter or full), optimiser, RNG."""
        import torch

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path / "weights")
        self.tokenizer.save_pretrained(path / "weights")
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save({"torch": torch.get_rng_state()}, path / "rng.pt")
        state = {"model_dir": str(self.model_dir), "config": self.config.to_json(), "steps_done": self.steps_done,
                 "python_rng": to_json(random.getstate())}
        (path / CHECKPOINT_FILE).write_text(json.dumps(state, indent=2))
        return path

    @classmethod
    def resume(cls, directory: str | os.PathLike[str]) -> Policy:
        """The policy saved at ``directory`` by :meth:`save`, ready to take its next step."""
        import torch

        path = Path(directory)
        state = json.loads((path / CHECKPOINT_FILE).read_text())
        policy = cls(state["model_dir"], PolicyConfig.from_json(state["config"]), _weights=path / "weights")
        policy.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu"))
        policy.steps_done = state["steps_done"]
        torch.set_rng_state(torch.load(path / "rng.pt", weights_only=True)["torch"])
        random.setstate(_tuples(state["python_rng"]))
        return policy

    # -- rollouts and export ------------------------------------------------------------------------

    def backend(self, **kwargs: Any) -> TransformersBackend:
        """A :class:`~scaffold.TransformersBackend` over the live model: rollouts always use the current weights."""
        from scaffold.backends._transformers import TransformersBackend

        return TransformersBackend(self.model, self.tokenizer, **kwargs)

    def merged_weights(self) -> dict[str, torch.Tensor]:
        """The current weights under the base model's names, LoRA deltas merged in (detached tensors)."""
        if self.config.lora is None:
            return {name: tensor.detach() for name, tensor in self.model.state_dict().items()}
        from peft.tuners.lora import LoraLayer

        base = self.model.get_base_model()
        deltas = {f"{name}.weight": module.get_delta_weight("default").detach()  # type: ignore[attr-defined]
                  for name, module in base.named_modules() if isinstance(module, LoraLayer)}
        merged = {}
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            name = name.replace(".base_layer.", ".")
            merged[name] = tensor.detach() + deltas[name] if name in deltas else tensor.detach()
        return merged

    def refresh(self, backend: Any, *, merge: bool | None = None) -> None:
        """Bring a separate rollout engine up to the current weights (nothing to copy for :meth:`backend`'s).

        The engine's ``weights_version`` becomes :attr:`steps_done`, so every completion it samples from
        now on records (``metadata["weight_versions"]``) the policy version that produced it. A
        :class:`~scaffold.TransformersBackend` over another model object gets the merged weights
        copied in. A ``VLLMBackend`` gets, for a LoRA policy on an engine built with ``enable_lora``,
        the adapter (saved to a private directory, loaded under the name ``"policy"`` and made
        active); otherwise, or with ``merge=True``, the merged weights through ``update_weights``.
        """
        from scaffold.backends._transformers import TransformersBackend

        if isinstance(backend, TransformersBackend):
            # the live backend shares the weights: only its version label moves (what its completions record)
            backend.update_weights(self.merged_weights() if backend.model is not self.model else [],
                                   version=self.steps_done)
            return
        if not hasattr(backend, "update_weights"):
            raise TypeError(f"cannot refresh a {type(backend).__name__}: it has no update_weights")
        if merge is None:
            merge = self.config.lora is None or not getattr(backend, "enable_lora", False)
        if merge:
            backend.update_weights(self.merged_weights(), version=self.steps_done)
            return
        if self.config.lora is None:
            raise ValueError("merge=False needs a LoRA policy")
        if self._adapter_dir is None:
            self._adapter_dir = tempfile.mkdtemp(prefix="scaffold-policy-adapter-")
            weakref.finalize(self, shutil.rmtree, self._adapter_dir, ignore_errors=True)
        self.model.save_pretrained(self._adapter_dir)
        backend.load_lora(self._adapter_dir, "policy")
        backend.update_weights([], version=self.steps_done)

    def export(self, directory: str | os.PathLike[str]) -> Path:
        """Save the trained model (LoRA merged) and its tokenizer with ``save_pretrained``, for vLLM or transformers."""
        import torch
        from transformers import AutoModelForCausalLM

        path = Path(directory)
        if self.config.lora is None:
            self.model.save_pretrained(path)
        else:
            with quiet_progress(enabled=self.model_dir.is_dir()):
                plain = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
            plain.load_state_dict(self.merged_weights())
            plain.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path


def _on_device(batch: TrainBatch, device: str) -> TrainBatch:
    return TrainBatch(input_ids_BT=batch.input_ids_BT.to(device), attention_mask_BT=batch.attention_mask_BT.to(device),
                      completion_mask_BT=batch.completion_mask_BT.to(device),
                      old_logprobs_BT=batch.old_logprobs_BT.to(device), advantages_B=batch.advantages_B.to(device),
                      roles=batch.roles)


def _select(batch: TrainBatch, rows: list[int]) -> TrainBatch:
    """Rows ``rows`` of ``batch``, trimmed to their longest sequence."""
    width = int(batch.attention_mask_BT[rows].sum(-1).max())
    return TrainBatch(
        input_ids_BT=batch.input_ids_BT[rows, :width],
        attention_mask_BT=batch.attention_mask_BT[rows, :width],
        completion_mask_BT=batch.completion_mask_BT[rows, :width],
        old_logprobs_BT=batch.old_logprobs_BT[rows, :width],
        advantages_B=batch.advantages_B[rows],
        roles=[batch.roles[i] for i in rows],
    )


def _metrics(step: int, items: Sequence[Credited], batch: TrainBatch, totals: _Totals, elapsed: float, *,
             kl: float | None, extra: dict[str, Any]) -> StepMetrics:
    advantages = batch.advantages_B
    rewards = [item.reward for item in items if item.reward is not None]
    return StepMetrics(
        step=step,
        loss=totals.loss,
        reward_mean=sum(rewards) / len(rewards) if rewards else None,
        accuracy=sum(r > 0 for r in rewards) / len(rewards) if rewards else None,
        advantage_mean=float(advantages.mean()),
        advantage_std=float(advantages.std(unbiased=False)),
        advantage_abs_max=float(advantages.abs().max()),
        entropy=totals.entropy,
        kl=kl,
        clip_fraction=totals.clipped,
        tokens=batch.tokens,
        tokens_per_s=batch.tokens / elapsed if elapsed > 0 else 0.0,
        extra=extra,
    )


def _role_metrics(items: Sequence[Credited], totals: _Totals, *, measured_kl: bool) -> dict[str, dict[str, Any]]:
    """Per role: traces, share with advantage 0 (no gradient signal), mean |advantage|, token entropy and KL."""
    out: dict[str, dict[str, Any]] = {}
    for role in sorted({item.role for item in items}):
        advantages = [abs(item.advantage) for item in items if item.role == role]
        tokens, entropy, kl_tokens, kl = totals.roles.get(role, [0.0, 0.0, 0.0, 0.0])
        out[role] = {
            "traces": len(advantages),
            "zero_advantage": sum(a < 1e-9 for a in advantages) / len(advantages),
            "advantage_abs_mean": sum(advantages) / len(advantages),
            "entropy": entropy / tokens if tokens else 0.0,
            "kl": (kl / kl_tokens if kl_tokens else None) if measured_kl else None,
        }
    return out


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
