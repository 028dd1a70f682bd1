"""trainers/ exports what it documents, and importing it loads no torch."""

from __future__ import annotations

import subprocess
import sys


def test_trainers_exports_import_and_match_all() -> None:
    """Every name in trainers.__all__ imports, and ``import *`` gives exactly ``__all__``."""
    import trainers

    namespace: dict[str, object] = {}
    exec("from trainers import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(trainers.__all__)
    assert len(set(trainers.__all__)) == len(trainers.__all__)


def test_importing_trainers_does_not_import_torch() -> None:
    """Credit assignment and the loop's types are usable without loading torch (it loads on first update)."""
    code = "import sys, trainers, graphs; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
