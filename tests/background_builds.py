"""The session's two pocket builds, started in the background as soon as the tests are collected.

Building the quick pocket model takes about two minutes and the default one about ten on two cores;
run where a test first asks for them, they would add twelve minutes to the suite. Both start right
after collection: the quick one at the tests' priority (the first tests that need it come a few
minutes in), the default one at the lowest (``nice 19``), so it trains on the CPU the tests leave
idle (waiting on servers, sleeps, Ray), and its test runs last. Both builds are deterministic (fixed
seed and threads): sharing the machine changes their time, not their weights. The fixtures that hand
the models out wait for the builds.
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
QUICK_NICE = 0
"""The quick build is waited for early (the vLLM and CLI tests): it runs at the tests' priority."""
DEFAULT_NICE = 19
"""The default build is waited for last (its test runs at the end): it takes the CPU the tests leave idle."""


class Build:
    """One build command in a child process; :meth:`result` waits for it and returns what it printed."""

    def __init__(self, command: list[str], nice: int, logs: Path) -> None:
        self.command, self.nice, self.logs = command, nice, logs
        self.process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self.process is None:  # output to files: a pipe nobody reads would fill and stop the build
                with open(self.logs / "out", "wb") as out, open(self.logs / "err", "wb") as err:
                    self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=out, stderr=err,
                                                    preexec_fn=lambda: os.nice(self.nice))

    def result(self, timeout: float = 1800) -> tuple[int, str, str]:
        """``(returncode, stdout, stderr)``, once the build has ended (started here if nobody started it)."""
        self.start()
        assert self.process is not None
        returncode = self.process.wait(timeout=timeout)
        return returncode, (self.logs / "out").read_text(), (self.logs / "err").read_text()

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
                            str(self.quick_cache)], QUICK_NICE, self._logs("quick"))
        self.default = Build([sys.executable, "-c", "import sys\nfrom scaffold.pocket import PocketConfig, "
                              "build_pocket_model\nbuild_pocket_model(sys.argv[1], PocketConfig(), progress=False)",
                              str(self.default_dir)], DEFAULT_NICE, self._logs("default"))

    def _logs(self, name: str) -> Path:
        folder = self.root / f"{name}-logs"
        folder.mkdir()
        return folder

    def start(self, *, quick: bool, default: bool) -> None:
        """Start the builds the collected tests need."""
        if quick:
            self.quick.start()
        if default:
            self.default.start()

    def close(self) -> None:
        self.quick.stop()
        self.default.stop()
        shutil.rmtree(self.root, ignore_errors=True)
