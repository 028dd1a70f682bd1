"""Dollar prices per token from litellm's price map, without importing litellm when it is not loaded yet.

litellm takes seconds to import; its price map is a JSON file inside the package. When litellm is
already imported, its live ``model_cost`` table is read (it holds what ``litellm.register_model``
added); otherwise the bundled file is read once, directly. No litellm installed: every price is
unknown. An unknown price is ``None``, never 0.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["price_per_token"]

_PRICE_FILE = "model_prices_and_context_window_backup.json"
_OPENAI_PROVIDERS = ("openai", "text-completion-openai")


def price_per_token(model: str) -> tuple[float, float] | None:
    """``(input, output)`` dollars per token of ``model`` (``"gpt-4o-mini"``, ``"openai/gpt-4o-mini"``), or ``None``.

    A name with a provider prefix is looked up as given, then (for ``openai/``) without it.

    Examples:
        >>> price_per_token("scaffold-unknown-model") is None
        True
    """
    table = _price_table()
    candidates = [model]
    provider, slash, bare = model.partition("/")
    if slash and provider == "openai":
        candidates.append(bare)
    for name in candidates:
        entry = table.get(name)
        if not isinstance(entry, Mapping):
            continue
        if name == bare and entry.get("litellm_provider") not in _OPENAI_PROVIDERS:
            continue
        try:
            prices = (float(entry["input_cost_per_token"]), float(entry["output_cost_per_token"]))
        except (KeyError, TypeError, ValueError):
            continue
        return prices
    return None


def _price_table() -> Mapping[str, Any]:
    litellm = sys.modules.get("litellm")
    live = getattr(litellm, "model_cost", None) if litellm is not None else None
    if isinstance(live, Mapping) and live:
        return live
    return _bundled_table()


@functools.cache
def _bundled_table() -> Mapping[str, Any]:
    """litellm's bundled price map, read once (empty without litellm or without the file)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return {}
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / _PRICE_FILE
        if path.is_file():
            try:
                table = json.loads(path.read_text())
            except (OSError, ValueError):
                return {}
            return table if isinstance(table, dict) else {}
    return {}
