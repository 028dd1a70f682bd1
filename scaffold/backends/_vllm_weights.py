"""Weight updates of :class:`~scaffold.backends._vllm.VLLMBackend`, on the vLLM worker's side.

:func:`reload_worker_weights` runs on the worker (through ``collective_rpc``): it checks with
:func:`check_whole_layers` that the update covers whole fused layers, then reloads the weights in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_whole_layers", "reload_worker_weights"]


def reload_worker_weights(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Runs on the vLLM worker: check that fused layers are whole, then reload in place."""
    check_whole_layers(worker.model_runner.get_model(), [name for name, _ in weights])
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)


def check_whole_layers(model: Any, names: list[str]) -> None:
    """Raise ``ValueError`` when ``names`` cover only part of a layer vLLM fuses (q/k/v, gate/up...).

    vLLM reloads a layer as a whole; a layer given in part would come back with uninitialised
    elements (NaN logprobs). Names vLLM maps differently from this scheme are left to vLLM.
    """
    packed: Mapping[str, list[str]] = getattr(model, "packed_modules_mapping", None) or {}
    fused_into = {member: fused for fused, members in packed.items() for member in members}
    parameters = {name.replace(".base_layer.", ".") for name, _ in model.named_parameters()}
    given: dict[str, set[tuple[str | None, str]]] = {}
    for name in names:
        module, _, parameter = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        fused = fused_into.get(leaf)
        target = f"{parent}.{fused}" if fused and parent else module
        if f"{target}.{parameter}" in parameters:
            given.setdefault(target, set()).add((leaf if fused else None, parameter))
    missing = []
    for target, got in given.items():
        parent, _, leaf = target.rpartition(".")
        members: list[str | None] = list(packed[leaf]) if leaf in packed and any(m for m, _ in got) else [None]
        own = {p.rpartition(".")[2] for p in parameters if p.rpartition(".")[0] == target}
        for member in members:
            for parameter in own:
                if (member, parameter) not in got:
                    missing.append(f"{parent}.{member}.{parameter}" if member else f"{target}.{parameter}")
    if missing:
        raise ValueError(f"update_weights covers part of a fused layer; also pass: {', '.join(sorted(missing))}")
