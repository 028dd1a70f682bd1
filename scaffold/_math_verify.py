"""math-verify, bounded in every thread: whether two answers are the same mathematical value.

math-verify bounds its work with signals, which only a process's main thread may use. In the main thread it
runs here with its timeouts (:data:`SECONDS` each). In any other thread (a served graph, a report read in a
worker thread) it would run unbounded: a tower of fifty powers compared with ``4`` took 42 s there, a longer one
never ended. There :func:`math_equal` asks a helper process instead (``python -m scaffold._math_verify``,
started on first use and reused), where math-verify runs in the main thread with the same timeouts; a comparison
that still takes longer than :data:`LIMIT` is unequal and the helper is stopped (the next one starts anew).

Examples:
    >>> math_equal("\\\\frac{1}{2}", "0.5"), math_equal("x+1", "1+x"), math_equal("3", "4")
    (True, True, False)
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["LIMIT", "SECONDS", "math_equal", "verify_here"]

SECONDS = 5
"""math-verify's timeout for one parse or one verification (in a main thread)."""

LIMIT = 30.0
"""Seconds a comparison may take in the helper (its own timeouts allow about 20) before it is given up as unequal
and the helper stopped."""


def math_equal(a: str, b: str) -> bool:
    """Whether math-verify finds ``a`` and ``b`` equal (either way round), bounded in time in any thread (not
    remembered here: :func:`scaffold._answers.equivalent` remembers its pairs)."""
    if threading.current_thread() is threading.main_thread():
        return verify_here(a, b)
    return _in_helper(a, b)


def verify_here(a: str, b: str) -> bool:
    """math-verify's verdict in this thread (its timeouts apply only when this is the main thread)."""
    pa, pb = _parsed(a), _parsed(b)
    if not pa or not pb:
        return False
    verify = _math_verify().verify
    try:
        return bool(verify(pa, pb, timeout_seconds=_timeout())) or bool(verify(pb, pa, timeout_seconds=_timeout()))
    except Exception:  # math-verify raises on exotic input; unequal is the safe answer
        return False


def _timeout() -> int | None:
    # math-verify times out with signals, which only the main thread may use
    return SECONDS if threading.current_thread() is threading.main_thread() else None


def _math_verify() -> Any:
    import math_verify
    import math_verify.grader
    import math_verify.parser

    # we pass timeouts ourselves (none off the main thread); silence its one-time warning about that
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    return math_verify


@lru_cache(maxsize=65536)
def _parsed(answer: str) -> Any:
    # ``\boxed`` makes math-verify read the string as a final answer
    try:
        return _math_verify().parse("\\boxed{" + answer + "}", parsing_timeout=_timeout())
    except Exception:  # timeouts and parser failures: treat as unparseable
        return []


# -- the helper process ------------------------------------------------------------------------------------------
_lock = threading.Lock()
_process: subprocess.Popen[str] | None = None


def _in_helper(a: str, b: str) -> bool:
    global _process
    with _lock:
        try:
            if _process is None or _process.poll() is not None:
                _stop()  # a helper that died: its pipes closed
                _process = _start()
            assert _process.stdin is not None and _process.stdout is not None
            _process.stdin.write(json.dumps([a, b]) + "\n")
            _process.stdin.flush()
            ready, _, _ = select.select([_process.stdout], [], [], LIMIT)
            line = _process.stdout.readline() if ready else ""
            if line.strip() in ("0", "1"):
                return line.strip() == "1"
        except (OSError, ValueError):  # the helper died or could not start
            pass
        _stop()
        return False


def _start() -> subprocess.Popen[str]:
    package_root = str(Path(__file__).resolve().parents[1])  # so the helper imports this same scaffold
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen([sys.executable, "-m", "scaffold._math_verify"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                            env={**os.environ, "PYTHONPATH": path})


@atexit.register
def _stop() -> None:
    global _process
    process, _process = _process, None
    if process is None:
        return
    if process.poll() is None:
        process.kill()
    process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:  # a pipe whose other end is gone
                pass


def _serve() -> None:
    """The helper's loop: one JSON pair a line in, ``1`` or ``0`` a line out, until its input closes."""
    for line in sys.stdin:
        a, b = json.loads(line)
        sys.stdout.write("1\n" if verify_here(str(a), str(b)) else "0\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
