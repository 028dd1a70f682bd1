"""The session's two pocket builds, started in the background as soon as the tests are collected.

Building the quick pocket model takes about two minutes and the default one about ten on two cores;
run where a test first asks for them, they would add twelve minutes to the suite. Started right after
collection (the quick one first, the default one when the quick one is done), they train while the
early tests run, at a lower priority (``nice``) so the tests keep the CPU they ask for. Both builds are
deterministic (fixed seed and threads): sharing the machine changes their time, not their weights.
The fixtures that hand the models out wait for the builds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NICE = 10
"""How much lower the builds' CPU priority is than the tests'."""


class Build:
    """One build command in a child process; :meth:`result` waits for it and returns what it printed."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.process: subprocess.Popen[str] | None = None
        self.started = threading.Event()
        self._output: tuple[int, str, str] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self.process is None:
                self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True, preexec_fn=lambda: os.nice(NICE))
        self.started.set()

    def result(self, timeout: float = 1800) -> tuple[int, str, str]:
        """``(returncode, stdout, stderr)``, once the build has ended (started here if nobody started it)."""
        self.start()
        with self._lock:
            if self._output is None:
                assert self.process is not None
                out, err = self.process.communicate(timeout=timeout)
                self._output = (self.process.returncode, out, err)
        return self._output

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Builds:
    """The quick build (``scaffold pocket build --quick``) and the default one (``build_pocket_model``)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="scaffold-test-pockets-"))
        self.quick_cache = self.root / "pocket-cache"
        self.default_dir = self.root / "pocket-default" / "model"
        self.default_dir.parent.mkdir()
        self.quick = Build([sys.executable, "-m", "scaffold", "pocket", "build", "--quick", "--cache-dir",
                            str(self.quick_cache)])
        self.default = Build([sys.executable, "-c", "import sys\nfrom scaffold.pocket import PocketConfig, "
                              "build_pocket_model\nbuild_pocket_model(sys.argv[1], PocketConfig(), progress=False)",
                              str(self.default_dir)])

    def start(self, *, quick: bool, default: bool) -> None:
        """Start what the collected tests need: the quick build now, the default one after it."""
        if quick:
            self.quick.start()

        def then_default() -> None:
            if quick:
                self.quick.result()
            self.default.start()

        if default:
            threading.Thread(target=then_default, name="pocket-default-build", daemon=True).start()

    def close(self) -> None:
        self.quick.stop()
        self.default.stop()
        shutil.rmtree(self.root, ignore_errors=True)
