"""Portable pocket builds: pinned kernels in a child process (the same bits whatever the caller set), typed errors."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from scaffold.pocket import BuildReport, PocketConfig, build_pocket_model
from scaffold.pocket._portable import PORTABLE_ENV, UNSET, cpu_name, x86_64

pytestmark = pytest.mark.skipif(not x86_64(), reason="portable arithmetic is defined for x86-64 CPUs only")

TINY = dict(max_steps=12, eval_problems=4, attempts=1)


def weights(path: Path) -> bytes:
    return (path / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def clean_portable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BuildReport]:
    """A tiny portable build (``PocketConfig.quick(**TINY)``) from a caller with no kernel settings, once per module."""
    path = tmp_path_factory.mktemp("portable") / "clean"
    return path, build_pocket_model(path, PocketConfig.quick(**TINY), progress=False)


def test_a_portable_build_ignores_the_callers_kernel_settings(clean_portable: tuple[Path, BuildReport],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever MKL and ATen variables the caller has set, the child trains with PORTABLE_ENV: equal bits."""
    config = PocketConfig.quick(**TINY)
    clean, first = clean_portable
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    for name in UNSET:
        monkeypatch.setenv(name, "SSE4_2")
    second = build_pocket_model(tmp_path / "steered", config, progress=False)
    assert weights(clean) == weights(tmp_path / "steered")
    assert first.arithmetic == second.arithmetic == "portable (MKL AVX2, ATen AVX2, x86_64)"
    assert json.loads((clean / "pocket_report.json").read_text())["arithmetic"] == first.arithmetic
    assert first.cpu == cpu_name() != "" and json.loads((clean / "pocket_report.json").read_text())["cpu"] == first.cpu
    assert isinstance(first, BuildReport) and first.steps == 12 and first.eval["problems"] == 4


def test_a_native_build_trains_in_this_process_with_its_own_kernels(clean_portable: tuple[Path, BuildReport],
                                                                    tmp_path: Path) -> None:
    """portable=False: no child, this process's MKL and ATen (recorded as native); other bits than portable."""
    import torch

    native = build_pocket_model(tmp_path / "native", PocketConfig.quick(portable=False, **TINY), progress=False)
    assert native.arithmetic.startswith("native (MKL ") and torch.backends.cpu.get_cpu_capability() in native.arithmetic
    portable_dir, portable = clean_portable  # the same config, portable
    assert portable.arithmetic.startswith("portable")
    if "MKL AUTO" not in native.arithmetic:  # reported, not dropped: the caller's own MKL_CBWR chose MKL's branch
        pytest.skip(f"this process runs MKL with MKL_CBWR={os.environ.get('MKL_CBWR')!r}, which may round as the "
                    "portable build does: the native weights need not differ")
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        pytest.skip("this CPU's own kernels are the AVX2 ones a portable build pins: the weights may be equal")
    assert weights(tmp_path / "native") != weights(portable_dir)  # AVX-512 kernels round otherwise than AVX2 ones


def test_a_portable_build_on_one_thread_is_repeatable_and_its_thread_count_is_part_of_its_config(
        clean_portable: tuple[Path, BuildReport], tmp_path: Path) -> None:
    """The thread count is part of what decides the model (on an AMD EPYC 1 and 2 threads train the same weights;
    on an Intel Xeon they differ in the last bits): at one count, the same bits every time."""
    assert PocketConfig.quick(**TINY).threads == 2
    one = PocketConfig.quick(threads=1, **TINY)
    assert one.fingerprint() != PocketConfig.quick(**TINY).fingerprint()
    build_pocket_model(tmp_path / "one", one, progress=False)
    build_pocket_model(tmp_path / "again", one, progress=False)
    assert weights(tmp_path / "one") == weights(tmp_path / "again")


def test_an_error_in_the_child_is_raised_typed_and_a_bad_config_before_any_child(tmp_path: Path) -> None:
    """A diverging training raises RuntimeError with the child's message; a bad task raises ValueError at once."""
    with pytest.raises(RuntimeError, match="loss diverged"):
        build_pocket_model(tmp_path / "diverged", PocketConfig.quick(lr=1e12, warmup_steps=1, **TINY), progress=False)
    assert not (tmp_path / "diverged" / "pocket_report.json").exists()
    with pytest.raises(ValueError, match="digits"):
        build_pocket_model(tmp_path / "bad", PocketConfig.quick(digits=0), progress=False)
    assert not (tmp_path / "bad").exists()  # refused before a child or a directory


def test_config_and_report_survive_their_json() -> None:
    """PocketConfig.from_dict and BuildReport.from_dict invert asdict through JSON; unknown keys are refused."""
    config = PocketConfig.quick(seed=7, portable=False)
    assert PocketConfig.from_dict(json.loads(json.dumps(asdict(config)))) == config
    assert PocketConfig().portable is True
    assert PocketConfig().fingerprint() != PocketConfig(portable=False).fingerprint()
    with pytest.raises(TypeError):
        PocketConfig.from_dict({"no_such_field": 1})
    report = BuildReport(build_seconds=1.5, train_seconds=1.0, steps=9, params=10, pass1=0.4, pass8=0.9, maj8=0.5,
                         maj4=0.45, agg4=0.6, checks=((5, 0.1),), selection=((9, {"pass1": 0.4}),),
                         arithmetic="portable (MKL AVX2, ATen AVX2, x86_64)")
    assert BuildReport.from_dict(json.loads(json.dumps(asdict(report)))) == report
    assert set(PORTABLE_ENV) == {"MKL_CBWR", "ATEN_CPU_CAPABILITY"}


def test_a_killed_parent_takes_its_training_child_with_it(tmp_path: Path) -> None:
    """SIGKILL of the process that asked for a build (no finally runs) ends the training child within seconds."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    out = tmp_path / "orphan"
    script = ("from scaffold.pocket import PocketConfig, build_pocket_model\n"
              f"build_pocket_model({str(out)!r}, PocketConfig.quick(max_steps=100000, check_from=100000))\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and "pocket: task" in parent.stdout.readline()  # the child is training
        # the parent's own children (never a scan of the machine): the training child names the output directory
        children = [child for child in psutil.Process(parent.pid).children() if _cmdline_has(child, str(out))]
        assert len(children) == 1 and _alive(children[0])
        os.kill(parent.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while _alive(children[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(children[0]), "the training child outlived its killed parent by 15 s"
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def _alive(process: Any) -> bool:
    """Whether ``process`` (a ``psutil.Process``) still runs: a zombie has ended, only its exit status is left."""
    import psutil

    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _cmdline_has(process: Any, text: str) -> bool:
    import psutil

    try:
        return any(text in part for part in process.cmdline())
    except psutil.Error:
        return False
