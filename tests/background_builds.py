"""The session's pocket builds (the quick model, the default one, the pocket agent), run in the background
while other tests (or lint) run.

Building the quick pocket model takes under a minute and the default one two to four alone on two cores;
run where a test first asks for them, they would add four minutes to the suite. So they run in the
background: the quick one at the tests' priority (the first tests that need it come a few minutes in),
the default one at the lowest (``nice 19``), so it trains on the CPU the tests leave idle (waiting on
servers, sleeps, Ray), and its test runs last. Both builds are deterministic (fixed seed and threads):
sharing the machine changes their time, not their weights. The fixtures that hand the models out wait
for the builds.

Two ways to start them:

* ``.ci/test.sh`` starts both before lint and type checks (``python tests/background_builds.py start DIR``)
  and hands ``DIR`` to pytest as ``$SCAFFOLD_TEST_BUILDS``: the session attaches to the running builds, so
  they get the minutes lint, mypy and collection take;
* otherwise the session starts the builds its collected tests need, right after collection; under
  pytest-xdist (``-n N``) the controller makes the directory and its workers attach to it, the first to
  ask starting each build.

Each build runs under a small runner (``python background_builds.py run LOGS -- COMMAND``) that writes
the command's output to ``LOGS/out`` and ``LOGS/err`` and its exit status to ``LOGS/rc``, so whoever
waits for it need not be its parent.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICK_NICE = 0
"""The quick build is waited for early (the vLLM and CLI tests): it runs at the tests' priority."""
AGENT_NICE = 5
"""The pocket agent (about two minutes) is waited for mid-suite: a little below the tests' priority."""
DEFAULT_NICE = 19
"""The default build is waited for last (its test runs at the end): it takes the CPU the tests leave idle."""
ENV = "SCAFFOLD_TEST_BUILDS"
"""A directory where ``start`` has already started the builds; the test session attaches to them."""


class Build:
    """One build command, run by a runner process; :meth:`result` waits for it and returns what it printed."""

    def __init__(self, command: list[str], nice: int, logs: Path) -> None:
        self.command, self.nice, self.logs = command, nice, logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        """The runner, when this object started it (kept, so it is reaped)."""

    @property
    def started(self) -> bool:
        return (self.logs / "claimed").exists()

    def start(self) -> None:
        """Start the runner (in its own process group, at ``nice``), unless this build was started already.

        Whoever makes the ``claimed`` directory starts it (``mkdir`` is atomic): two test processes (pytest-xdist's
        workers) asking at once start one build, and both wait for it.
        """
        try:
            (self.logs / "claimed").mkdir()
        except FileExistsError:
            return
        runner = [sys.executable, __file__, "run", str(self.logs), "--", *self.command]
        quiet = subprocess.DEVNULL
        # its own process group (killed as one), not its own session: Linux's autogroups would then share the
        # CPU between sessions and nice would count only within them, so a nice-19 build took its full share
        # OpenMP threads that sleep at a barrier instead of spinning: a build sharing the cores with the tests
        # would otherwise burn the CPU it waits on (the same arithmetic, so the same weights)
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        self.process = subprocess.Popen(runner, cwd=ROOT, stdin=quiet, stdout=quiet, stderr=quiet, env=env,
                                        process_group=0, preexec_fn=lambda: os.nice(self.nice))
        (self.logs / "pid.tmp").write_text(str(self.process.pid))
        os.replace(self.logs / "pid.tmp", self.logs / "pid")  # whole or absent, as ``rc``

    def result(self, timeout: float = 1800) -> tuple[int, str, str]:
        """``(returncode, stdout, stderr)``, once the build has ended (started here if nobody started it)."""
        self.start()
        deadline = time.monotonic() + timeout
        while not (self.logs / "pid").exists():  # claimed by another process, which is starting it
            if time.monotonic() > deadline:
                raise TimeoutError(f"the build {self.command} was claimed but never started")
            time.sleep(0.1)
        pid = int((self.logs / "pid").read_text())
        while not (self.logs / "rc").exists():
            if self.process is not None:
                self.process.poll()  # reaps our own runner once it ends
            if not _alive(pid) and not (self.logs / "rc").exists():
                return -1, self._read("out"), self._read("err") + "\nthe build's runner ended without an exit status"
            if time.monotonic() > deadline:
                raise TimeoutError(f"the build {self.command} did not end within {timeout} s")
            time.sleep(0.5)
        if self.process is not None:
            self.process.wait()
        return int((self.logs / "rc").read_text()), self._read("out"), self._read("err")

    def _read(self, name: str) -> str:
        path = self.logs / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Kill the runner and its build if they still run."""
        if self.started and not (self.logs / "rc").exists():
            try:
                os.killpg(int((self.logs / "pid").read_text()), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError):
                pass
        if self.process is not None:
            self.process.wait()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a runner this process started is reaped by ``poll`` first, never a zombie here)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and somebody else's
        pass
    return True


class Builds:
    """The quick build (``scaffold pocket build --quick``) and the default one (``build_pocket_model``)."""

    def __init__(self, root: str | Path | None = None, *, owned: bool | None = None) -> None:
        """Under ``root`` (default ``$SCAFFOLD_TEST_BUILDS``, else a new directory). ``owned``: whether :meth:`close`
        stops the builds and removes the directory (default: only a directory made here)."""
        given = root if root is not None else os.environ.get(ENV)
        self.owned = not given if owned is None else owned
        self.root = Path(given) if given else Path(tempfile.mkdtemp(prefix="scaffold-test-pockets-"))
        self.quick_cache = self.root / "pocket-cache"
        self.default_dir = self.root / "pocket-default" / "model"
        self.default_dir.parent.mkdir(parents=True, exist_ok=True)
        self.quick = Build([sys.executable, "-m", "scaffold", "pocket", "build", "--quick", "--cache-dir",
                            str(self.quick_cache)], QUICK_NICE, self.root / "quick-logs")
        self.default = Build([sys.executable, "-c", "import sys\nfrom scaffold.pocket import PocketConfig, "
                              "build_pocket_model\nbuild_pocket_model(sys.argv[1], PocketConfig(), progress=False)",
                              str(self.default_dir)], DEFAULT_NICE, self.root / "default-logs")
        self.agent = Build([sys.executable, "-c", "import sys\nfrom scaffold.pocket import pocket_agent\n"
                            "pocket_agent(sys.argv[1], progress=False)", str(self.quick_cache)], AGENT_NICE,
                           self.root / "agent-logs")
        """The default pocket agent, into the quick build's cache (where ``pocket_agent(cache)`` finds it)."""

    def start(self, *, quick: bool, default: bool, agent: bool = False) -> None:
        """Start the builds the collected tests need (a build started already is left as it is)."""
        if quick:
            self.quick.start()
        if agent:
            self.agent.start()
        if default:
            self.default.start()

    def close(self) -> None:
        """Stop and remove the builds this object made its directory for; attached ones are their starter's."""
        if self.owned:
            self.stop()
            shutil.rmtree(self.root, ignore_errors=True)

    def stop(self) -> None:
        self.quick.stop()
        self.agent.stop()
        self.default.stop()


def _run(logs: Path, command: list[str]) -> int:
    """The runner: the command's output to ``logs/out`` and ``logs/err``, its exit status to ``logs/rc``."""
    with open(logs / "out", "wb") as out, open(logs / "err", "wb") as err:
        returncode = subprocess.call(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    (logs / "rc.tmp").write_text(str(returncode))
    os.replace(logs / "rc.tmp", logs / "rc")  # whole or absent: a waiter never reads half a status
    return returncode


def main(argv: list[str]) -> int:
    """``start DIR``: start both builds under DIR and return; ``stop DIR``: kill them if they still run;
    ``run LOGS -- COMMAND``: the runner."""
    if len(argv) == 2 and argv[0] in ("start", "stop"):
        builds = Builds(argv[1])
        if argv[0] == "start":
            builds.start(quick=True, default=True, agent=True)
        else:
            builds.stop()
        return 0
    if len(argv) >= 4 and argv[0] == "run" and argv[2] == "--":
        return _run(Path(argv[1]), argv[3:])
    print("usage: background_builds.py start DIR | stop DIR | run LOGS -- COMMAND", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
