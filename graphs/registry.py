"""Topologies by name, with build parameters from text: what ``scaffold run``, ``eval`` and ``graph show`` use.

``build_topology("rsa", {"n": "8", "steps": "3"})`` builds :data:`TOPOLOGIES` ``["rsa"]``
with its parameters parsed from strings (``8`` is an int, ``0.5`` a float, ``true`` a bool,
``a,b`` a tuple for tuple parameters such as MoA's proposers; anything else stays a string).
With ``prompts="pocket"`` every prompt parameter is set to the pocket model's two prompts (its
solve prompt for first samples, its aggregation prompt for every prompt that reads candidates),
best-of-N and weighted majority score with the pocket task's step verifier instead of a judge
model, and pairwise ranking judges by agreement (the pocket model can aggregate but not judge).
Parameters renamed to ``n`` / ``k`` (:data:`RENAMED`) are still accepted under their old names,
with a ``DeprecationWarning``.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import scaffold as sf
from graphs.agg_agent import agg_agent
from graphs.agglm import agglm, ssa
from graphs.best_of_n import best_of_n, weighted_majority
from graphs.deepconf import deepconf
from graphs.evolve import evolve
from graphs.moa import mixture_of_agents, self_moa, self_moa_seq
from graphs.pacore import pacore
from graphs.pairwise import agreement_verdict, pairwise_ranking
from graphs.parallel_agents import parallel_agents
from graphs.react import react
from graphs.rsa import rsa
from graphs.self_consistency import self_consistency
from graphs.single import single_sample
from graphs.tree import aggregation_tree
from scaffold._errors import GraphDefinitionError

TOPOLOGIES: dict[str, sf.GraphFunction] = {
    "single_sample": single_sample,
    "self_consistency": self_consistency,
    "best_of_n": best_of_n,
    "weighted_majority": weighted_majority,
    "rsa": rsa,
    "evolve": evolve,
    "mixture_of_agents": mixture_of_agents,
    "self_moa": self_moa,
    "self_moa_seq": self_moa_seq,
    "deepconf": deepconf,
    "pacore": pacore,
    "agglm": agglm,
    "ssa": ssa,
    "aggregation_tree": aggregation_tree,
    "pairwise_ranking": pairwise_ranking,
    "react": react,
    "agents": parallel_agents,
    "agg_agent": agg_agent,
}
"""The topologies a command line can name (the ones that take only a ``problem`` input)."""

RENAMED: dict[str, dict[str, str]] = {
    "rsa": {"population": "n", "subset_size": "k"},
    "evolve": {"population": "n", "parents": "k"},
    "pairwise_ranking": {"population": "n"},
    "self_moa": {"samples": "n"},
    "agglm": {"candidates": "n"},
    "ssa": {"samples": "n"},
    "aggregation_tree": {"leaves": "n", "branching": "k"},
}
"""Old build-parameter names :func:`build_topology` still takes, by topology: ``{old: new}``."""

_READS_CANDIDATES = ("aggregate_prompt", "evolve_prompt", "moa_prompt", "summary_prompt", "compare_prompt",
                     "refine_prompt", "compact_prompt")
"""Prompt parameters that show the model a set of candidates (the pocket model's aggregation prompt)."""


def parse_value(text: str, default: Any = None) -> Any:
    """A build parameter from its command-line text, typed like ``default`` where that decides.

    Examples:
        >>> parse_value("8"), parse_value("0.5"), parse_value("true"), parse_value("solver")
        (8, 0.5, True, 'solver')
        >>> parse_value("a,b", default=("x",)), parse_value("none")
        (('a', 'b'), None)
    """
    value = text.strip()
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    if isinstance(default, tuple):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(default, str):
        return value
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    return literal if isinstance(literal, (int, float)) else value


def topology(name: str) -> sf.GraphFunction:
    """The graph function called ``name``: a ready-made one, or your own as ``FILE.py:NAME`` / ``MODULE:NAME``.

    An unknown name raises with the known ones. Example:

        >>> topology("rsa").name
        'rsa'
    """
    if ":" in name:
        return _user_topology(name)
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise GraphDefinitionError(f"unknown topology {name!r}; known: {', '.join(TOPOLOGIES)}, "
                                   "or your own as FILE.py:NAME or MODULE:NAME") from None


def _user_topology(reference: str) -> sf.GraphFunction:
    """``path/to/file.py:name`` or ``package.module:name`` -> that ``@sf.graph`` function."""
    import importlib
    import importlib.util
    import sys

    where, _, attribute = reference.rpartition(":")
    if not where or not attribute:
        raise GraphDefinitionError(f"{reference!r}: give a topology as FILE.py:NAME or MODULE:NAME")
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise GraphDefinitionError(f"{reference!r}: no file {path}")
            spec = importlib.util.spec_from_file_location(f"scaffold_user_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except GraphDefinitionError:
        raise
    except Exception as exc:  # the user's code failed to import: say where, in one line
        raise GraphDefinitionError(f"{reference!r}: importing {where} failed: {type(exc).__name__}: {exc}") from None
    found = getattr(module, attribute, None)
    if found is None:
        raise GraphDefinitionError(f"{reference!r}: {where} has no {attribute!r}")
    if not isinstance(found, sf.GraphFunction):
        raise GraphDefinitionError(f"{reference!r} is a {type(found).__name__}, not an @sf.graph function")
    return found


def pocket_defaults(name: str, model_dir: str | Path | None = None) -> dict[str, Any]:
    """The build parameters that fit topology ``name`` to the pocket model (prompts, verifier, verdict)."""
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask, pocket_task

    accepted = topology(name).defaults
    params: dict[str, Any] = {}
    if "prompt" in accepted:
        params["prompt"] = SOLVE_PROMPT
    params.update({key: AGGREGATE_PROMPT for key in _READS_CANDIDATES if key in accepted})
    if "verifier" in accepted:
        params["verifier"] = StepVerifier(pocket_task(model_dir) if model_dir is not None else PocketTask())
    if "verdict" in accepted:
        params["verdict"] = agreement_verdict
    return params


class StepVerifier:
    """The pocket task's process verifier as a best-of-N ``verifier(problem, trace)``: share of right steps."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.__qualname__ = f"StepVerifier({task.digits}x{task.terms})"
        self.__module__ = __name__

    def __call__(self, problem: str, trace: sf.Trace) -> float:
        return float(self.task.check_steps(problem, trace.text))


def build_topology(name: str, params: Mapping[str, str | Any] | None = None, *, prompts: str = "generic",
                   model_dir: str | Path | None = None) -> sf.Graph:
    """Build topology ``name`` with ``params`` (strings are parsed by :func:`parse_value`).

    ``prompts="pocket"`` starts from :func:`pocket_defaults` (``model_dir`` names the pocket
    model, whose task the step verifier checks); explicit ``params`` win over those defaults. An old
    parameter name (:data:`RENAMED`) works with a ``DeprecationWarning``; giving it with its new name
    is an error.

    Examples:
        >>> build_topology("rsa", {"n": "4", "k": "2", "steps": "1"}).count_calls()
        {'solver': 8}
    """
    function = topology(name)
    if prompts not in ("generic", "pocket"):
        raise ValueError(f"prompts must be 'generic' or 'pocket', got {prompts!r}")
    values: dict[str, Any] = pocket_defaults(name, model_dir) if prompts == "pocket" else {}
    for key, raw in _renamed(name, params or {}).items():
        if key not in function.defaults:
            raise GraphDefinitionError(f"topology {name!r} has no parameter {key!r}; its parameters are: "
                                       f"{', '.join(function.defaults)}")
        values[key] = parse_value(raw, function.defaults[key]) if isinstance(raw, str) else raw
        default = function.defaults[key]
        if isinstance(default, bool) and not isinstance(values[key], bool):
            raise GraphDefinitionError(f"parameter {key!r} of {name!r} takes true or false, got {raw!r}")
        if type(default) is int and not isinstance(values[key], int):
            raise GraphDefinitionError(f"parameter {key!r} of {name!r} takes a whole number, got {raw!r}")
    return function.build(**values)


def _renamed(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with old parameter names of topology ``name`` replaced by the new ones (warning for each)."""
    renamed = RENAMED.get(name, {})
    out: dict[str, Any] = {}
    for key, value in params.items():
        new = renamed.get(key)
        if new is None:
            out[key] = value
            continue
        if new in params:
            raise GraphDefinitionError(f"parameter {key!r} of {name!r} is the old name of {new!r}, which is given too; "
                                       f"give only {new!r}")
        warnings.warn(f"parameter {key!r} of {name!r} is deprecated; use {new!r}", DeprecationWarning, stacklevel=3)
        out[new] = value
    return out


def describe_parameters(name: str) -> str:
    """One line per build parameter of topology ``name`` with its default (long prompts shortened)."""
    lines = []
    for key, default in topology(name).defaults.items():
        shown = _short(default)
        lines.append(f"{key} = {shown}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    if isinstance(value, str):
        flat = " ".join(value.split())
        return repr(flat if len(flat) <= 40 else flat[:37] + "...")
    if isinstance(value, Callable):  # type: ignore[arg-type]
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


__all__ = ["RENAMED", "StepVerifier", "TOPOLOGIES", "build_topology", "describe_parameters", "parse_value",
           "pocket_defaults", "topology"]
