"""The trained model: LoRA or full fine-tuning, one optimiser step per call, exact checkpoints, live rollouts.

:class:`Policy` owns a Hugging Face causal LM (float32 on the CPU), its tokenizer, an AdamW optimiser
and, when the KL penalty is on, a frozen reference copy of the starting weights. :meth:`Policy.step`
is the update: collate the credited traces, then per micro-batch score the recorded tokens, take
the clipped loss and back-propagate, then clip the gradient norm and step. Micro-batch losses are
weighted by their share of the step's tokens (or sequences), so the accumulated gradient equals
the gradient of the whole batch's loss however it is split.

Per-role learning rates (``PolicyConfig(role_lr=...)``) give each distinct rate its own AdamW state:
the traces of its roles are a batch of their own (their loss, gradient and norm clip), every group's
gradient is taken at the same weights, then each optimiser steps with its own. A loss weight would
not do: Adam divides a gradient's scale out, so only the step size is a role's own learning rate.

Rollouts always see the current weights: :meth:`Policy.backend` is a
:class:`~scaffold.TransformersBackend` over the live model object (the peft-wrapped one with LoRA),
and :meth:`Policy.refresh` copies the weights into a separate engine (another transformers model, or
a :class:`~scaffold.backends._vllm.VLLMBackend`: the adapter through ``load_lora`` when it was built
with ``enable_lora``, else the merged weights through ``update_weights``).

Needs the ``train`` extra (torch, transformers, peft for LoRA); this module imports without it.
"""

from __future__ import annotations

import contextlib
import json
import math
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
from trainers.types import ROLES, Credited, StepMetrics, TrainBatch

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
    role_lr: dict[str, float] = field(default_factory=dict)
    """Per role (``"single"``, ``"search"``, ``"aggregate"``) a multiplier of ``lr``; a role not named keeps ``lr``.
    When they differ, each distinct multiplier has its own AdamW state, and its roles' traces update through it
    at ``lr * multiplier``, their gradient accumulated and norm-clipped on their own (each optimiser also applies
    ``weight_decay`` at its own rate). 0 freezes a role: its traces are scored for the metrics, never trained.
    Equal multipliers (or none): one optimiser at ``lr`` times that multiplier, the plain step. Example:
    ``PolicyConfig(lr=1e-5, role_lr={"aggregate": 3.0})`` trains aggregations at 3e-5, the rest at 1e-5."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.role_lr) - set(ROLES))
        if unknown:
            raise ValueError(f"role_lr names unknown roles {unknown}; the roles are {', '.join(ROLES)}")
        negative = sorted(role for role, value in self.role_lr.items() if not value >= 0)  # NaN included
        if negative:
            raise ValueError(f"role_lr multipliers must be >= 0 (0 freezes a role); {negative} are not")

    def lr_multipliers(self) -> dict[str, float]:
        """Every role's multiplier of ``lr`` (1.0 for a role ``role_lr`` does not name).

        Examples:
            >>> PolicyConfig(role_lr={"aggregate": 3}).lr_multipliers()
            {'single': 1.0, 'search': 1.0, 'aggregate': 3.0}
        """
        return {role: float(self.role_lr.get(role, 1.0)) for role in ROLES}

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
        trained = [p for p in self.model.parameters() if p.requires_grad]
        rates = set(self.config.lr_multipliers().values())
        self.optimizers: dict[float, torch.optim.Optimizer] = {
            multiplier: torch.optim.AdamW(trained, lr=self.config.lr * multiplier, betas=self.config.betas,
                                          weight_decay=self.config.weight_decay)
            for multiplier in sorted(rates, reverse=True) if multiplier > 0}
        """An AdamW optimiser per distinct learning-rate multiplier above 0 (one, usually; see ``role_lr``)."""
        self.steps_done = 0
        self._adapter_dir: str | None = None

    # -- the update ---------------------------------------------------------------------------------

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The AdamW optimiser, when every trained role shares one (else see :attr:`optimizers`)."""
        if len(self.optimizers) != 1:
            raise ValueError(f"this policy has {len(self.optimizers)} optimisers (role_lr): see policy.optimizers")
        return next(iter(self.optimizers.values()))

    def step(self, items: Sequence[Credited], *, fill_logprobs: bool = False) -> StepMetrics:
        """One optimiser step on ``items``: micro-batches, accumulated gradients, clipped norm, AdamW.

        Traces recorded without logprobs raise ``ValueError`` unless ``fill_logprobs``: then the
        current weights supply them (see :func:`trainers.batch.collate`). With per-role learning rates
        (``config.role_lr``) each rate's traces take this step through their own optimiser. No items
        (a step whose traces were all filtered out) leave the weights as they are; the step still counts.
        """
        started = time.perf_counter()
        config = self.config
        if not items:
            self.steps_done += 1
            return StepMetrics(step=self.steps_done, loss=0.0, reward_mean=None, accuracy=None, advantage_mean=0.0,
                               advantage_std=0.0, advantage_abs_max=0.0, entropy=0.0, kl=None, clip_fraction=0.0,
                               tokens=0, tokens_per_s=0.0, extra={"grad_norm": 0.0, "roles": {}})
        # 1) tensors: prompt + recorded completion, sampling logprobs, advantages
        batch = collate(items, self.tokenizer, pad_id=self.pad_id, max_length=config.max_length,
                        model=self.model if fill_logprobs else None)
        if config.device != "cpu":
            batch = _on_device(batch, config.device)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        totals = _Totals()
        # 2-3) per learning rate (one group unless role_lr sets several): score, loss, backward, clip
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        norms: dict[str, float] = {}
        gradients: list[tuple[torch.optim.Optimizer, list[Any]]] = []
        for multiplier, rows in self._lr_groups(items):
            optimizer = self.optimizers.get(multiplier)  # None: frozen roles, scored for the metrics only
            norm = self._accumulate(batch, rows, totals, train=optimizer is not None)
            if optimizer is not None:
                norms["+".join(sorted({items[row].role for row in rows}))] = norm
                gradients.append((optimizer, [p.grad for p in parameters]))
                self.model.zero_grad(set_to_none=True)
        # 4) each optimiser steps with its own gradient, every one taken at the same weights
        for optimizer, grads in gradients:
            for parameter, grad in zip(parameters, grads):
                parameter.grad = grad
            optimizer.step()
        self.model.zero_grad(set_to_none=True)
        self.steps_done += 1
        elapsed = time.perf_counter() - started
        extra: dict[str, Any] = {"grad_norm": next(iter(norms.values()), 0.0)}
        if len(norms) > 1:  # the norm of every group's gradient together, and each group's (keyed by its roles)
            extra.update(grad_norm=math.sqrt(sum(n * n for n in norms.values())), grad_norms=norms)
        extra.update(ratio_mean=totals.ratio, seconds=elapsed,
                     roles=_role_metrics(items, totals, measured_kl=self.reference is not None))
        return _metrics(self.steps_done, items, batch, totals, elapsed,
                        kl=totals.kl / max(totals.kl_tokens, 1) if self.reference is not None else None, extra=extra)

    def _lr_groups(self, items: Sequence[Credited]) -> list[tuple[float, list[int]]]:
        """Row indices of ``items`` per learning-rate multiplier: every row in one group when the roles share one."""
        multipliers = self.config.lr_multipliers()
        if len(set(multipliers.values())) == 1:
            return [(multipliers[ROLES[0]], list(range(len(items))))]
        groups: dict[float, list[int]] = {}
        for row, item in enumerate(items):
            if item.role not in multipliers:
                raise ValueError(f"trace {item.trace.id} has role {item.role!r}; role_lr knows {', '.join(ROLES)}")
            groups.setdefault(multipliers[item.role], []).append(row)
        return sorted(groups.items(), reverse=True)

    def _accumulate(self, batch: TrainBatch, rows: list[int], totals: _Totals, *, train: bool) -> float:
        """Steps 2-3 for ``rows`` of ``batch``: per micro-batch, score the recorded tokens and take the loss, the
        mean over these rows; when ``train``, back-propagate it and clip the gradient norm (returned; else 0)."""
        import torch

        config = self.config
        lengths = batch.attention_mask_BT.sum(-1).tolist()
        row_tokens = batch.completion_mask_BT.sum(-1).tolist()
        group_tokens, group_rows = sum(row_tokens[row] for row in rows), len(rows)
        total_tokens, total_rows = batch.tokens, len(lengths)
        # this group's share of the step's loss (1 with one group: the plain step)
        weight = (1.0 if group_rows == total_rows else group_tokens / max(total_tokens, 1)
                  if config.normalise == "token" else group_rows / total_rows)
        for chosen in self._micro_batches(len(rows), [lengths[row] for row in rows]):
            micro_rows = [rows[i] for i in chosen]
            micro = _select(batch, micro_rows)
            # 2) score the recorded tokens under the current (and reference) weights
            with contextlib.nullcontext() if train else torch.no_grad():
                new_logprobs, entropy = token_logprobs(self.model, micro)
            totals.add_entropy(micro, entropy.detach())
            ref_logprobs = None
            if self.reference is not None:
                every = 1 if config.kl_coef > 0 else config.measure_kl_every
                scored = [j for j, row in enumerate(micro_rows) if row % every == 0]
                if scored:
                    measured_rows = micro if len(scored) == len(micro_rows) else _select(micro, scored)
                    with torch.no_grad():
                        ref_scored, _ = token_logprobs(self.reference, measured_rows)
                        mine = new_logprobs.detach()[scored, : ref_scored.shape[1]]
                        totals.add_kl(measured_rows, k3(ref_scored, mine, measured_rows.completion_mask_BT))
                    ref_logprobs = ref_scored if config.kl_coef > 0 else None
            # 3) the clipped loss, weighted by this micro-batch's share of the group
            loss, measured = policy_loss(new_logprobs, micro.old_logprobs_BT, micro.advantages_B,
                                         micro.completion_mask_BT, clip_low=config.clip_low,
                                         clip_high=config.clip_high, kl_coef=config.kl_coef,
                                         ref_logprobs_BT=ref_logprobs, normalise=config.normalise)
            share = (micro.tokens / max(group_tokens, 1) if config.normalise == "token"
                     else len(micro_rows) / group_rows)
            if train:
                (loss * share).backward()
            token_share = micro.tokens / max(total_tokens, 1)
            totals.loss += float(loss.detach()) * share * weight
            totals.entropy += float((entropy.detach() * micro.completion_mask_BT).sum()) / max(total_tokens, 1)
            totals.clipped += measured["clip_fraction"] * token_share
            totals.ratio += measured["ratio_mean"] * token_share
        if not train:
            return 0.0
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        return float(torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm or float("inf")))

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
        for multiplier, name in self._optimizer_files().items():
            torch.save(self.optimizers[multiplier].state_dict(), path / name)
        torch.save({"torch": torch.get_rng_state()}, path / "rng.pt")
        state = {"model_dir": str(self.model_dir), "config": self.config.to_json(), "steps_done": self.steps_done,
                 "python_rng": to_json(random.getstate())}
        (path / CHECKPOINT_FILE).write_text(json.dumps(state, indent=2))
        return path

    def _optimizer_files(self) -> dict[float, str]:
        """Each optimiser's file in a checkpoint: ``optimizer.pt`` for the one of a plain policy, else one per rate."""
        if len(self.optimizers) == 1:
            return {multiplier: "optimizer.pt" for multiplier in self.optimizers}
        return {multiplier: f"optimizer-x{multiplier!r}.pt" for multiplier in self.optimizers}

    @classmethod
    def resume(cls, directory: str | os.PathLike[str]) -> Policy:
        """The policy saved at ``directory`` by :meth:`save`, ready to take its next step."""
        import torch

        path = Path(directory)
        state = json.loads((path / CHECKPOINT_FILE).read_text())
        policy = cls(state["model_dir"], PolicyConfig.from_json(state["config"]), _weights=path / "weights")
        for multiplier, name in policy._optimizer_files().items():
            state_dict = torch.load(path / name, weights_only=True, map_location="cpu")
            policy.optimizers[multiplier].load_state_dict(state_dict)
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
