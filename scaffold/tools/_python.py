"""A Python executor tool: the model's code runs in a separate, limited subprocess.

What each run of :func:`python_executor`'s tool gets:

- a **new Python process** (``python -I``: isolated mode, no user site-packages, no ``PYTHON*``
  variables), in its own process group, killed as a group at the wall-clock timeout;
- a **private temporary directory** as its working directory and ``HOME``/``TMPDIR``, deleted after;
- a **scrubbed environment**: only ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` (no API key or any other
  variable of the parent reaches it);
- **resource limits** (``setrlimit``): CPU seconds, address space (memory), the size of any file it
  writes, and open files;
- **no network** where the OS allows it: on Linux, when unprivileged user namespaces are available
  (``unshare --net --map-root-user`` works), the process runs in a new network namespace with no
  interface but a down loopback. :func:`network_isolated` says whether this machine gives it; the
  tool records it with each call (``metadata["network_isolated"]``).

What it does **not** isolate: the process runs as the same user, so it can **read** any file that
user can, and write where that user may (within the file-size limit); there is no seccomp filter or
container. Run it in a container or VM of its own for code you do not trust at all.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

from scaffold._tools import DEFAULT_MAX_RESULT_CHARS, Tool

__all__ = ["PythonExecutor", "network_isolated", "python_executor"]

_UNSHARE = ("unshare", "--net", "--map-root-user")


@functools.cache
def network_isolated() -> bool:
    """Whether code can be run without network on this machine (Linux user and network namespaces)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


class PythonExecutor(Tool):
    """Runs Python code in a limited subprocess and answers with its output (see the module docstring).

    The answer is the process's stdout, then its stderr under ``[stderr]``, then ``[exit status N]`` when it
    did not exit with 0 (``[killed: ...]`` when a limit stopped it). Limits: ``timeout`` (wall-clock seconds),
    ``cpu_seconds``, ``memory_mb`` (address space), ``max_file_mb`` (any file it writes).
    """

    def __init__(self, *, name: str = "python", timeout: float = 10.0, cpu_seconds: int = 10, memory_mb: int = 1024,
                 max_file_mb: int = 16, max_in_flight: int | None = 4, network: bool = False,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS) -> None:
        description = (
            "Run a Python 3 program and get what it prints (stdout, then stderr). Each call is a fresh process: "
            "nothing is kept between calls. Print the values you need."
        )
        parameters = {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The program, for example print(2 ** 100)."}},
            "required": ["code"],
            "additionalProperties": False,
        }
        # the process is killed at `timeout`; the tool's own timeout is a little later, for the cleanup
        super().__init__(name, description, parameters, timeout=timeout + 5.0, max_in_flight=max_in_flight,
                         max_result_chars=max_result_chars)
        self.run_timeout = timeout
        self.cpu_seconds = cpu_seconds
        self.memory_mb = memory_mb
        self.max_file_mb = max_file_mb
        self.network = network

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from scaffold._errors import ToolArgumentsError

        code = arguments.get("code")
        if not isinstance(code, str) or set(arguments) - {"code"}:
            raise ToolArgumentsError(f"{self.name}: takes one argument, code (a string)")
        if "\x00" in code:
            raise ToolArgumentsError(f"{self.name}: the code contains a NUL character")
        return {"code": code}

    def recorded(self) -> dict[str, Any]:
        """Whether this call ran without network."""
        return {"network_isolated": not self.network and network_isolated()}

    async def invoke(self, arguments: dict[str, Any]) -> str:
        workdir = tempfile.mkdtemp(prefix="scaffold-python-")
        try:
            script = os.path.join(workdir, "main.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(arguments["code"])
            return await self._run(script, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def _run(self, script: str, workdir: str) -> str:
        command = [sys.executable, "-I", script]
        if not self.network and network_isolated():
            command = [*_UNSHARE, *command]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        process = await asyncio.create_subprocess_exec(
            *command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=self._limits,
        )
        killed = None
        try:
            async with asyncio.timeout(self.run_timeout):
                stdout, stderr = await process.communicate()
        except TimeoutError:
            killed = f"wall-clock timeout of {self.run_timeout}s"
            _kill_group(process.pid)
            stdout, stderr = await process.communicate()
        except asyncio.CancelledError:
            _kill_group(process.pid)
            raise
        finally:
            if process.returncode is None:
                _kill_group(process.pid)
        return _answer(stdout, stderr, process.returncode, killed, self.cpu_seconds)

    def _limits(self) -> None:  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 1))
        memory = self.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        size = self.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _answer(stdout: bytes, stderr: bytes, status: int | None, killed: str | None, cpu_seconds: int) -> str:
    parts = [stdout.decode("utf-8", "replace")]
    err = stderr.decode("utf-8", "replace")
    if err:
        parts.append(("\n" if parts[0] and not parts[0].endswith("\n") else "") + "[stderr]\n" + err)
    if killed is None and status is not None and status < 0:
        name = signal.Signals(-status).name if -status in signal.valid_signals() else str(-status)
        killed = {"SIGXCPU": f"CPU limit of {cpu_seconds}s", "SIGKILL": "killed (memory or CPU limit)"}.get(name, name)
    if killed is not None:
        parts.append(f"\n[killed: {killed}]")
    elif status:
        parts.append(f"\n[exit status {status}]")
    return "".join(parts).strip("\n") or "[no output]"


def python_executor(**options: Any) -> PythonExecutor:
    """A Python executor tool; options as :class:`PythonExecutor` (``timeout``, ``cpu_seconds``, ``memory_mb``...).

    Examples:
        >>> import asyncio
        >>> runner = python_executor(timeout=20)
        >>> print(asyncio.run(runner.call({"code": "print(sum(range(10)))"})).text)
        45
    """
    return PythonExecutor(**options)
