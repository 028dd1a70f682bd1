"""The positive control of a set-RL experiment: does a set's success depend on more than how many members are right?

Set-level credit can only beat crediting each trace by its own reward when a set's value depends on how its
members *combine*, not only on how many of them are right. :func:`set_signal` measures that on sets sampled
from a model before any training: a logistic regression of set success on the count of right members (one
indicator per count, so any function of the count fits), against the same with more features (coverage,
diversity...). It reports the likelihood-ratio test of the added features and, the figure that does not
trust the model, the gain in held-out log-loss by cross-validation. A gain near zero says the task carries
no set-level signal: change the task before running any method.

Examples:
    >>> sets = [{"success": float(c >= 2), "right": r, "coverage": c} for r in range(5) for c in range(4)] * 20
    >>> report = set_signal(sets, added=("coverage",))
    >>> report.loglik_gain > 0.1, report.p_value < 1e-6
    (True, True)
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SignalReport:
    """What :func:`set_signal` found (log-losses in nats per set)."""

    sets: int
    features: tuple[str, ...]
    """The features added to the count."""
    loglik_base: float
    """Log-likelihood of the count-only model (all sets)."""
    loglik_full: float
    lr_statistic: float
    """Twice the log-likelihood gained by the added features."""
    df: int
    p_value: float
    """Of the likelihood-ratio test (chi-square with ``df`` degrees of freedom)."""
    heldout_base: float
    """Mean held-out log-loss of the count-only model (``folds``-fold cross-validation)."""
    heldout_full: float
    loglik_gain: float
    """``heldout_base - heldout_full``: how much the added features predict beyond the count, on sets not fit."""
    by_count: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per count of right members: ``sets`` and ``success`` (the share that succeeded)."""
    by_feature: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """Per added feature and value: ``sets`` and ``success``."""

    def as_dict(self) -> dict[str, Any]:
        return {"sets": self.sets, "features": list(self.features), "loglik_gain": self.loglik_gain,
                "p_value": self.p_value, "lr_statistic": self.lr_statistic, "df": self.df,
                "heldout_base": self.heldout_base, "heldout_full": self.heldout_full,
                "by_count": self.by_count, "by_feature": self.by_feature}


def set_signal(
    sets: Sequence[Mapping[str, float]],
    *,
    outcome: str = "success",
    count: str = "right",
    added: Sequence[str] = ("coverage", "diversity"),
    folds: int = 5,
    seed: int = 0,
) -> SignalReport:
    """Fit set success on the count of right members, then with ``added`` features too, and compare.

    Each set is a mapping with ``outcome`` (0 or 1), ``count`` (an integer) and every name of ``added``
    (numbers; each enters linearly and, when it takes few integer values, as indicators too, so that the
    comparison does not hinge on a linear form). ``ValueError`` with fewer than 20 sets or a missing key.
    """
    import numpy as np

    if len(sets) < 20:
        raise ValueError(f"a positive control needs at least 20 sets, got {len(sets)}")
    for name in (outcome, count, *added):
        if any(name not in s for s in sets):
            raise ValueError(f"every set needs {name!r}")
    y = np.array([float(s[outcome]) for s in sets])
    counts = sorted({int(s[count]) for s in sets})
    base = np.array([[1.0] + [float(int(s[count]) == c) for c in counts[1:]] for s in sets])
    extra_columns: list[list[float]] = []
    for name in added:
        values = [float(s[name]) for s in sets]
        levels = sorted(set(values))
        if all(v.is_integer() for v in levels) and len(levels) <= 8:
            extra_columns += [[float(v == level) for v in values] for level in levels[1:]]
        else:
            extra_columns.append(values)
    full = np.hstack([base, np.array(extra_columns).T]) if extra_columns else base
    base_ll, full_ll = _loglik(base, y), _loglik(full, y)
    statistic = max(0.0, 2 * (full_ll - base_ll))
    df = full.shape[1] - base.shape[1]
    order = list(range(len(sets)))
    random.Random(seed).shuffle(order)
    held_base = held_full = 0.0
    for fold in range(folds):
        test = order[fold::folds]
        train = [i for i in order if i not in set(test)]
        held_base += _heldout(base, y, train, test)
        held_full += _heldout(full, y, train, test)
    held_base, held_full = held_base / len(sets), held_full / len(sets)
    return SignalReport(
        sets=len(sets), features=tuple(added), loglik_base=base_ll, loglik_full=full_ll, lr_statistic=statistic,
        df=df, p_value=_chi2_sf(statistic, df), heldout_base=held_base, heldout_full=held_full,
        loglik_gain=held_base - held_full, by_count=_table(sets, count, outcome),
        by_feature={name: _table(sets, name, outcome) for name in added})


def _fit(x: Any, y: Any, *, ridge: float = 1e-4, iterations: int = 50) -> Any:
    """Logistic regression weights by Newton's method (a small ridge keeps separable data finite)."""
    import numpy as np

    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-np.clip(x @ w, -30, 30)))
        gradient = x.T @ (y - p) - ridge * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + ridge * np.eye(x.shape[1])
        delta = np.linalg.solve(hessian, gradient)
        w += delta
        if float(np.abs(delta).max()) < 1e-9:
            break
    return w


def _logloss(x: Any, y: Any, w: Any) -> float:
    import numpy as np

    p = np.clip(1 / (1 + np.exp(-np.clip(x @ w, -30, 30))), 1e-12, 1 - 1e-12)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).sum())


def _loglik(x: Any, y: Any) -> float:
    return -_logloss(x, y, _fit(x, y))


def _heldout(x: Any, y: Any, train: list[int], test: list[int]) -> float:
    return _logloss(x[test], y[test], _fit(x[train], y[train]))


def _chi2_sf(statistic: float, df: int) -> float:
    """P(chi-square with ``df`` degrees of freedom > ``statistic``): the regularised upper incomplete gamma."""
    if df <= 0:
        return 1.0
    import torch

    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(statistic / 2, dtype=torch.float64)))


def _table(sets: Sequence[Mapping[str, float]], key: str, outcome: str) -> dict[str, dict[str, float]]:
    groups: dict[float, list[float]] = {}
    for s in sets:
        groups.setdefault(float(s[key]), []).append(float(s[outcome]))
    return {(str(int(v)) if v.is_integer() else f"{v:g}"): {"sets": len(g), "success": sum(g) / len(g)}
            for v, g in sorted(groups.items())}

