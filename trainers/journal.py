"""Step 7 of the training loops: each step's metrics logged and shown, and checkpoints.

A step's metrics go into the history, the JSONL log, ``on_step`` and the progress bar; a checkpoint is the
policy's own, with the loop's state (the name its rollouts are recorded under) beside it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.types import StepMetrics, TrainablePolicy

if TYPE_CHECKING:
    from trainers.loop import LoopConfig

LOOP_FILE = "loop.json"
"""Beside a checkpoint: the loop's own state (the name its rollouts are recorded under)."""


class Journal:
    """Step 7 of both loops: each step's metrics into the history, the JSONL log, ``on_step`` and the progress
    bar; a checkpoint every ``config.checkpoint_every`` steps and one at the end (with ``config.checkpoint_dir``)."""

    def __init__(self, policy: TrainablePolicy, config: LoopConfig, *, start: int, progress: bool,
                 on_step: Callable[[StepMetrics], None] | None = None, run_name: str | None = None) -> None:
        self.policy, self.config, self.on_step, self.run_name = policy, config, on_step, run_name
        self.log = Path(config.log_path) if config.log_path else None
        self.bar = _progress(progress, config.steps, start)
        self.history: list[StepMetrics] = []

    def record(self, metrics: StepMetrics, step: int) -> list[StepMetrics]:
        """Keep, log and show the metrics of loop step ``step`` (0-based); returns the history so far."""
        self.history.append(metrics)
        _log(self.log, metrics)
        if self.on_step is not None:
            self.on_step(metrics)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(reward=_shown(metrics.reward_mean), acc=_shown(metrics.accuracy, ".2f"),
                                 loss=f"{metrics.loss:.4f}")
        every, directory = self.config.checkpoint_every, self.config.checkpoint_dir
        if directory and every and (step + 1) % every == 0:
            self._save(directory)
        return self.history

    def _save(self, directory: str) -> None:
        self.policy.save(directory)
        if self.run_name is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            (Path(directory) / LOOP_FILE).write_text(json.dumps({"run_name": self.run_name}))

    def close(self) -> list[StepMetrics]:
        """Close the progress bar, save the final checkpoint; returns the history."""
        if self.bar is not None:
            self.bar.close()
        if self.config.checkpoint_dir:
            self._save(self.config.checkpoint_dir)
        return self.history


def _shown(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _log(path: Path | None, metrics: StepMetrics) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(asdict(metrics), default=float) + "\n")


def _progress(enabled: bool, total: int, start: int) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, unit="step", desc="training")
