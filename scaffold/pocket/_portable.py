"""Portable arithmetic: a pocket build that pins the kernels it trains with, whatever the caller set.

Training a pocket model is chaotic: the last bits of one matrix product decide, hundreds of
steps later, at which step accuracy climbs and how well the model aggregates there. Those bits
depend on the CPU. MKL picks its matrix kernels by vendor and instruction set (an Intel and an
AMD processor with the same AVX-512 run different code) and ATen its vectorised kernels by
instruction set, so a seed that lands in the aggregation regime on one machine can miss it on
another: this is what failed CI on one runner while it passed on others.

A *portable* build fixes both before torch loads, in a child process of its own:

- ``MKL_CBWR=AVX2``: MKL's conditional numerical reproducibility on its AVX2 branch, with a fixed
  number of threads (the config's ``threads``);
- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, on every CPU that has AVX2 (all x86-64
  servers of the last ten years; an older one falls back to what it has).

What that buys, as measured: a build is the same, bit for bit, from run to run on one machine,
whatever kernel variables the caller set (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``, ...),
and with transformers 5.19 or 5.24. It is *not* the same on every x86-64 CPU: an Intel and an AMD
processor train different models from one seed. :attr:`BuildReport.cpu` records where a build ran.

It costs about as much as native arithmetic (a training step of the default model: 185 ms against
177 ms on two cores of an AMD EPYC). MKL's SSE2 branch (``MKL_CBWR=COMPATIBLE``), which an earlier
version pinned, cost 1.8x that and still differed between Intel and AMD. On a CPU that is not
x86-64 (an Arm Mac, say) the variables change nothing and the build is native there.

Examples:
    >>> sorted(PORTABLE_ENV)
    ['ATEN_CPU_CAPABILITY', 'MKL_CBWR']
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

PORTABLE_ENV: Mapping[str, str] = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
"""The environment a portable build runs in (read once, when torch and MKL load)."""
UNSET = ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
"""Variables that would steer the kernels a portable build runs; its child starts without them."""
ERROR_FILE = ".build_error.json"
"""Where the child writes the type and message of an exception, so the parent raises the same type."""
RAISED = {"ValueError": ValueError, "RuntimeError": RuntimeError, "MemoryError": MemoryError,
          "OSError": OSError, "ImportError": ImportError}


def x86_64() -> bool:
    """Whether this machine is x86-64 (where MKL and ATen's AVX2 kernels apply)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def in_portable_process() -> bool:
    """Whether this process started with :data:`PORTABLE_ENV` (its torch then computes portably)."""
    return all(os.environ.get(name) == value for name, value in PORTABLE_ENV.items())


def cpu_name() -> str:
    """The processor this runs on, in words: vendor and model from ``/proc/cpuinfo``, else what
    :mod:`platform` knows (``""`` if nothing).

    Examples:
        >>> isinstance(cpu_name(), str)
        True
    """
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():  # the first processor says it all
                    break
    except OSError:
        pass
    named = " ".join(v for v in (fields.get("vendor_id", ""), fields.get("model name", "")) if v)
    return named or platform.processor() or platform.machine()


def arithmetic() -> str:
    """How this process computes, in words (the build report records it).

    E.g. ``"portable (MKL AVX2, ATen AVX2, x86_64)"`` or ``"native (MKL AUTO, ATen AVX512, x86_64)"``.
    """
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    mkl = os.environ.get("MKL_CBWR", "AUTO")
    kind = "portable" if in_portable_process() and x86_64() else "native"
    return f"{kind} (MKL {mkl}, ATen {capability}, {platform.machine()})"


def build_in_child(out_dir: Path, config: Any, *, progress: bool) -> dict[str, Any]:
    """Run :func:`~scaffold.pocket.build_pocket_model` in a fresh interpreter with :data:`PORTABLE_ENV`.

    Progress goes to this process's stdout and stderr as it happens. Returns the report the child
    saved (a dict); an exception in the child is raised here with its type (when it is one of
    :data:`RAISED`) and message; a child killed by a signal raises :class:`RuntimeError`.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ERROR_FILE).unlink(missing_ok=True)
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**{k: v for k, v in os.environ.items() if k not in UNSET}, **PORTABLE_ENV, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    # -c, not -m: running a module its own package has imported makes runpy warn on every build
    command = [sys.executable, "-c", CHILD_MAIN, str(out_dir), json.dumps(asdict(config)),
               "1" if progress else "0", str(os.getpid())]
    child = subprocess.Popen(command, env=env, stdout=None if progress else subprocess.DEVNULL)
    try:
        code = child.wait()
    finally:
        if child.poll() is None:  # interrupted here (Ctrl-C, a timeout): never leave it training
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    error_file = out_dir / ERROR_FILE
    if code != 0:
        if error_file.is_file():
            error = json.loads(error_file.read_text())
            error_file.unlink()
            raise RAISED.get(error["type"], RuntimeError)(error["message"])
        raise RuntimeError(f"the pocket build's child process ended with exit code {code}")
    from scaffold.pocket._config import REPORT

    return dict(json.loads((out_dir / REPORT).read_text()))


def end_with_parent(parent: int, every: float = 0.5) -> threading.Thread:
    """A daemon thread that ends this process as soon as ``parent`` is no longer its parent.

    A parent killed outright (SIGKILL, SIGTERM, a CI timeout) runs no ``finally``; without this its
    child would train on, orphaned, taking the CPU of whatever runs next.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(3)

    thread = threading.Thread(target=watch, name="end-with-parent", daemon=True)
    thread.start()
    return thread


CHILD_MAIN = "import sys; from scaffold.pocket._child import main; sys.exit(main(*sys.argv[1:5]))"
"""What the child interpreter runs (:func:`scaffold.pocket._child.main`)."""
