"""Pocket model benchmark: build the default pocket model from scratch and measure it on held-out problems.

Trains the default :class:`~scaffold.pocket.PocketConfig` in a temporary directory (never the
cache), then evaluates it through scaffold on 200 held-out problems: 8 samples per problem at
temperature 1 (pass@1, pass@8, majority@8), and the model aggregating its own samples four at a
time with the pocket aggregation prompt, greedily (agg@4), next to majority@4 over the very same
groups. Prints the build's progress, the figures, whether each target of the pocket model holds
(pass@1 in [0.25, 0.60], pass@8 ≥ 1.5 × pass@1, majority@8 > pass@1, training ≤ 300 s), and
last one JSON object with the figures.

Training is deterministic given the seed (a fixed number of steps chosen by a seeded held-out
check); the seconds are wall-clock on whatever else the machine is doing.

Usage: python benchmarks/pocket.py [--quick] [--seed N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from scaffold.pocket import BuildReport, PocketConfig, build_pocket_model

TRAIN_SECONDS = 300.0
"""The training budget the default model is meant to fit on two CPU cores."""


def targets(report: BuildReport) -> dict[str, bool]:
    """Which of the pocket model's behaviour targets a build meets."""
    return {
        "pass1_in_band": 0.25 <= report.pass1 <= 0.60,
        "pass8_over_1.5x_pass1": report.pass8 >= 1.5 * report.pass1,
        "maj8_over_pass1": report.maj8 > report.pass1,
        "trained_within_300s": report.train_seconds <= TRAIN_SECONDS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the seconds-sized 2 x 2-digit model (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="save the model here instead of a temporary directory")
    args = parser.parse_args()

    config = PocketConfig.quick(seed=args.seed) if args.quick else PocketConfig(seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="scaffold-pocket-bench-") as scratch:
        report = build_pocket_model(args.keep or Path(scratch) / "model", config)

    met = targets(report)
    if args.quick:
        print("targets: not applicable to the --quick model (an easier task, stopped early)")
    else:
        for name, ok in met.items():
            print(f"target {name}: {'yes' if ok else 'NO'}")
    figures = {
        "bench": "pocket",
        "quick": args.quick,
        "seed": args.seed,
        "task": config.task.name,
        "fingerprint": config.fingerprint(),
        "build_seconds": round(report.build_seconds, 1),
        "train_seconds": round(report.train_seconds, 1),
        "steps": report.steps,
        "params": report.params,
        "pass1": round(report.pass1, 4),
        "pass8": round(report.pass8, 4),
        "maj8": round(report.maj8, 4),
        "maj4": round(report.maj4, 4),
        "agg4": round(report.agg4, 4),
        "agg4_temperature": 0.0,
        "samples_per_second": round(report.eval["samples_per_second"], 1),
        "aggregations_per_second": round(report.eval["aggregations_per_second"], 1),
        "targets_met": None if args.quick else all(met.values()),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
