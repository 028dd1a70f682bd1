"""Pocket model benchmark: build pocket models from scratch and check each lands in the aggregation regime.

Trains :class:`~scaffold.pocket.PocketConfig` for every ``--seeds`` x ``--threads`` (torch threads,
a stand-in for another machine's arithmetic) in a temporary directory (never the cache), and
reports the held-out figures each build measured through scaffold (``PocketConfig.eval_problems``,
100 problems by default): 8 samples per problem at temperature 1 (pass@1, pass@8, majority@8), and
the model aggregating its own samples four at a time with the pocket aggregation prompt, greedily
(agg@4), next to majority@4 over the very same groups. Prints one line per build, whether each
meets the regime (:class:`~scaffold.pocket.Regime`: pass@1 in [0.25, 0.60], pass@8 >= 1.5 x pass@1,
majority@8 > pass@1, agg@4 >= majority@4 + 0.05) and the 3-minute build budget, the range of every
figure over the builds, and last one JSON object: ``bench``, ``builds`` (one object per build),
``ranges`` (figure → [min, max]), ``all_in_regime``, ``all_within_budget``, ``max_build_seconds``.

A build is deterministic given its seed and threads on one machine; the seconds are wall-clock on
whatever else the machine is doing.

``--cache-dir DIR`` takes each build from a pocket cache instead (``scaffold.pocket.pocket_model``: built
there on first use, reused after) and reports the build saved there, seconds included: with a cache that
holds them already (the test suite's quick build), the run takes seconds and prints the same keys.

Usage: python benchmarks/pocket.py [--quick] [--seeds 0 1 2 3 4] [--threads 1 2] [--keep DIR | --cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from scaffold.pocket import BuildReport, PocketConfig, build_pocket_model, load_report, pocket_model

BUILD_SECONDS = 180.0
"""The time a default build is meant to fit on two CPU cores, alone on them, evaluation included."""
FIGURES = ("pass1", "pass8", "maj8", "maj4", "agg4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the seconds-sized model of the tests")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    saved = parser.add_mutually_exclusive_group()
    saved.add_argument("--keep", type=Path, help="save the models under this directory instead of a temporary one")
    saved.add_argument("--cache-dir", type=Path,
                       help="take each build from this pocket cache (built there if missing) and report the saved one")
    args = parser.parse_args()

    builds = []
    with tempfile.TemporaryDirectory(prefix="scaffold-pocket-bench-") as scratch:
        root = args.keep or Path(scratch)
        for seed in args.seeds:
            for threads in args.threads:
                config = (PocketConfig.quick(seed=seed, threads=threads) if args.quick
                          else PocketConfig(seed=seed, threads=threads))
                if args.cache_dir is not None:
                    report = BuildReport.from_dict(load_report(pocket_model(args.cache_dir, config=config,
                                                                            progress=False)))
                else:
                    report = build_pocket_model(root / f"seed{seed}-threads{threads}", config, progress=False)
                build = {"seed": seed, "threads": threads, "fingerprint": config.fingerprint(),
                         **{name: round(getattr(report, name), 4) for name in FIGURES},
                         "in_regime": report.in_regime, "steps": report.steps, "chosen_step": report.chosen_step,
                         "build_seconds": round(report.build_seconds, 1),
                         "within_budget": report.build_seconds <= BUILD_SECONDS}
                builds.append(build)
                print(f"seed {seed} threads {threads}: " + "  ".join(f"{n} {build[n]:.3f}" for n in FIGURES)
                      + f"  step {report.chosen_step}/{report.steps}  {report.build_seconds:.0f} s  "
                      + ("in the regime" if report.in_regime else "OUTSIDE the regime"), flush=True)
    ranges = {name: [min(b[name] for b in builds), max(b[name] for b in builds)]
              for name in (*FIGURES, "build_seconds")}
    print("ranges: " + "  ".join(f"{n} {low:.3f}-{high:.3f}" for n, (low, high) in ranges.items()))
    print(json.dumps({"bench": "pocket", "quick": args.quick, "builds": builds, "ranges": ranges,
                      "all_in_regime": all(b["in_regime"] for b in builds),
                      "all_within_budget": all(b["within_budget"] for b in builds),
                      "max_build_seconds": max(b["build_seconds"] for b in builds)}))


if __name__ == "__main__":
    main()
