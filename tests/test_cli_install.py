"""The command line on an API-only install (``pip install 'scaffold-sdk[api]'``): ``--help`` works, a missing extra
is one line that names it, and every ``--help`` example parses and, unless it says what else it needs, needs
nothing beyond ``[api]``.

The API-only install is simulated, not built: a real virtualenv with scaffold-sdk[api] took over two minutes to
install here (litellm alone brings some sixty packages), too long for the suite. Instead the commands run in a
subprocess whose ``sitecustomize.py`` hides every module such an install lacks: the top-level modules of the
installed distributions outside the dependency closure of ``scaffold-sdk[api]``, worked out from the installed
metadata, so the set follows pyproject (torch, transformers, vllm, ray, fastapi, starlette, uvicorn, pyarrow,
matplotlib, datasets, psycopg, opentelemetry, numpy...). The import system then finds no hidden module, so
``import torch`` raises the very ``ModuleNotFoundError`` an absent package raises, and
``importlib.util.find_spec("torch")`` is ``None``, as it is there.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import click
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from graphs.registry import RENAMED, TOPOLOGIES, build_topology
from scaffold import HUB_DATASETS
from scaffold.cli import main
from scaffold.cli._extras import extras, missing_dependency
from scaffold.cli._models import parse_model_options
from scaffold.cli._options import split_params, topology_aliases
from scaffold.store import Store
from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-fake-install-key-8d1e"

SITECUSTOMIZE = '''\
"""Hide the modules an API-only install of scaffold-sdk lacks (see tests/test_cli_install.py)."""
import os
import sys
from importlib.machinery import PathFinder

_ABSENT = frozenset(os.environ["SCAFFOLD_TEST_ABSENT"].split(","))


class _ApiOnlyFinder(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in _ABSENT:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [_ApiOnlyFinder if finder is PathFinder else finder for finder in sys.meta_path]
'''


@cache
def api_only_absent() -> tuple[str, ...]:
    """The top-level modules installed here that ``pip install 'scaffold-sdk[api]'`` would not install."""
    keep = {"pip", "setuptools", "wheel"}  # a fresh virtualenv's own
    todo: list[tuple[str, frozenset[str]]] = [("scaffold-sdk", frozenset({"api"}))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (canonicalize_name(name), wanted) in seen:
            continue
        seen.add((canonicalize_name(name), wanted))
        keep.add(canonicalize_name(name))
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requirements:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in wanted | {""}):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return tuple(sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                        if module.isidentifier() and not any(canonicalize_name(d) in keep for d in dists)))


def api_only(*args: str, cwd: Path, env: dict[str, str] | None = None,
             python: tuple[str, ...] = ("-m", "scaffold")) -> subprocess.CompletedProcess[str]:
    """``python -m scaffold ARGS...`` (or ``python PYTHON...``) as on an API-only install, in ``cwd``."""
    hook = cwd / "api-only-site"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SCAFFOLD_", "OPENAI_"))}
    environment.update({"PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]),
                        "SCAFFOLD_TEST_ABSENT": ",".join(api_only_absent()),
                        "SCAFFOLD_CACHE": str(cwd / "cache"), "SCAFFOLD_STORE": str(cwd / "runs.db")})
    environment.update(env or {})
    return subprocess.run([sys.executable, *python, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=environment)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed: exit status 1, nothing else on stderr, no traceback."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def sum_policy(request: Any) -> str:
    """A stand-in API model that adds up the first ``a+b+...`` in its prompt and boxes the total."""
    numbers = re.search(r"\d+(?:\+\d+)+", request.last_content)
    return f"Adding up: \\boxed{{{sum(map(int, numbers.group(0).split('+'))) if numbers else 0}}}"


# -- the simulation and the extras ------------------------------------------------------------
def test_the_simulated_install_lacks_the_local_model_and_server_extras(tmp_path: Path) -> None:
    """In the subprocess torch & co. are not found (find_spec is None, import raises ModuleNotFoundError), the
    [api] packages are, and ``import scaffold`` imports none of the hidden ones."""
    script = ("import importlib.util, json, sys\n"
              "import scaffold, scaffold.cli\n"
              "found = {m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}\n"
              "try:\n    import torch\nexcept ModuleNotFoundError as error:\n    found['torch_error'] = error.name\n"
              "found['loaded'] = sorted(m for m in sys.modules if m.partition('.')[0] in "
              "set(__import__('os').environ['SCAFFOLD_TEST_ABSENT'].split(',')))\n"
              "print(json.dumps(found))\n")
    wanted = ["torch", "transformers", "vllm", "ray", "fastapi", "starlette", "uvicorn", "pyarrow", "matplotlib",
              "datasets", "psycopg", "opentelemetry", "litellm", "openai", "aiohttp", "sqlalchemy"]
    done = api_only(*wanted, cwd=tmp_path, python=("-c", script))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {m for m in wanted if found[m]} == {"litellm", "openai", "aiohttp", "sqlalchemy"}
    assert found["torch_error"] == "torch" and found["loaded"] == []


def test_every_optional_module_maps_to_the_extra_pyproject_lists() -> None:
    """The extras the CLI names come from the installed metadata and agree with pyproject's optional-dependencies."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    known = extras()
    for module, extra in {"torch": "train", "transformers": "train", "peft": "train", "vllm": "vllm",
                          "ray": "cluster", "fastapi": "serve", "starlette": "serve", "uvicorn": "serve",
                          "pyarrow": "parquet", "matplotlib": "plot", "datasets": "hub", "psycopg": "postgres",
                          "opentelemetry": "otel", "litellm": "api", "aiohttp": "api", "mcp": "mcp"}.items():
        assert known[module] == extra
        if module != "starlette":  # fastapi brings it
            assert any(Requirement(r).name.lower().replace("-", "_").startswith(module) for r in optional[extra])
    assert not {"dev", "docs"} & set(known.values())


def test_every_help_page_shows_without_the_optional_extras(tmp_path: Path) -> None:
    """`scaffold --help` and the --help of every command and group print their usage on an API-only install."""
    done = api_only("--help", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: scaffold [OPTIONS] COMMAND"), done.stderr
    script = ("import json, sys\n"
              "from click.testing import CliRunner\n"
              "from scaffold.cli import main\n"
              "pages = {}\n"
              "for path in sys.argv[1:]:\n"
              "    result = CliRunner().invoke(main, [*path.split(), '--help'])\n"
              "    pages[path] = (result.exit_code, result.output.split(None, 1)[0])\n"
              "print(json.dumps(pages))\n")
    paths = [" ".join(path) for path, _ in commands()]
    shown = api_only(*paths, cwd=tmp_path, python=("-c", script))
    assert shown.returncode == 0, shown.stderr[-3000:]
    pages = json.loads(shown.stdout)
    assert len(pages) == len(paths) > 15 and {tuple(page) for page in pages.values()} == {(0, "Usage:")}


# -- one line for a missing extra -------------------------------------------------------------
def test_only_a_missing_module_becomes_an_install_hint() -> None:
    """A missing module names its extra (and, for a command with --model, the API models); our own hint is kept;
    a broken import inside scaffold or a name missing from a module keeps its traceback."""
    def raised(error: Exception, cause: Exception | None = None) -> Exception:
        try:
            raise error from cause
        except Exception as caught:
            return caught

    torch = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert missing_dependency(torch, "pocket") == ("scaffold pocket needs torch, which is not installed: "
                                                   "pip install 'scaffold-sdk[train]'")
    assert missing_dependency(raised(ImportError("wrapped"), torch), "run", takes_models=True) == (
        "scaffold run needs torch, which is not installed: pip install 'scaffold-sdk[train]'; "
        "or pass an API model: --model ALIAS=provider/model")
    hinted = raised(ImportError("VLLMBackend needs vLLM: pip install 'scaffold-sdk[vllm]'\nmore"),
                    ModuleNotFoundError("No module named 'vllm'", name="vllm.engine"))
    assert missing_dependency(hinted, "eval") == "VLLMBackend needs vLLM: pip install 'scaffold-sdk[vllm]'"
    assert missing_dependency(ModuleNotFoundError("x", name="some_plugin"), "run") == (
        "scaffold run needs some_plugin, which is not installed")
    assert missing_dependency(ModuleNotFoundError("x", name="scaffold.backends._gone"), "run") is None
    assert missing_dependency(ImportError("cannot import name 'x' from 'litellm'"), "run") is None


def test_run_without_torch_says_install_train_or_pass_a_model(tmp_path: Path) -> None:
    """The issue's first example on an API-only install: one line naming [train] and --model, no traceback."""
    done = api_only("run", "self_consistency", "-p", "n=8", "--problem", "12+7+30", "--answer", "49", cwd=tmp_path)
    line = one_error_line(done)
    assert "the default model is the local pocket model" in line
    assert "pip install 'scaffold-sdk[train]'" in line and "--model solver=openai/gpt-4o-mini" in line
    assert done.stdout == "" and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("args", "extra"), [
    (("run", "single_sample", "--model", "pocket", "--problem", "1+2"), "train"),
    (("pocket", "build", "--quick"), "train"),
    (("pocket", "agent"), "train"),
    (("train", "--steps", "1"), "train"),
    (("serve", "single_sample", "--model", "openai/gpt-4o-mini", "--check"), "serve"),
    (("ui",), "serve"),
    (("eval", "single_sample", "--model", "openai/gpt-4o-mini", "--limit", "1", "--ray"), "cluster"),
    (("runs", "export", "--out", "calls.parquet"), "parquet"),
    (("runs", "export", "--format", "otlp", "--endpoint", "http://127.0.0.1:9"), "otel"),
    (("--store", "postgresql://me@127.0.0.1:9/db", "runs", "list"), "postgres"),
], ids=lambda value: "-".join(value[:2]) if isinstance(value, tuple) else value)
def test_a_command_that_needs_a_missing_extra_names_it_in_one_line(tmp_path: Path, args: tuple[str, ...],
                                                                   extra: str) -> None:
    """Without the extra a command needs: exit status 1 and one ``Error:`` line with the pip install that fixes it."""
    Store(tmp_path / "runs.db").close()
    done = api_only(*args, cwd=tmp_path, env={"OPENAI_API_KEY": KEY})
    line = one_error_line(done)
    assert f"pip install 'scaffold-sdk[{extra}]'" in line, line
    assert ("--model" in line) == (args[0] == "run"), line  # a local model: or an API one


# -- the --help examples ----------------------------------------------------------------------
_MARK = re.compile(r"needs scaffold-sdk\[([a-z0-9_,-]+)\]")
_PRIVATE = re.compile(r"\bscaffold(?:\.\w+)*\._\w+")


def commands(command: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                          click.Command]]:
    """Every command and group of the command line, with its path under ``scaffold``."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


def examples(help_text: str) -> Iterator[tuple[str, set[str]]]:
    """The ``scaffold ...`` command lines of a help text (continuations joined, shell pipes and redirections cut),
    with the extras their comment says they need."""
    lines = iter(help_text.splitlines())
    if not any(line.strip() == "Examples:" for line in lines):
        return
    for line in lines:
        while line.rstrip().endswith("\\"):
            line = line.rstrip()[:-1] + " " + next(lines).strip()
        found = re.search(r"(?:^|\|\s*)(?:python -m )?(scaffold .*)$", line.strip())
        if found is None:
            continue
        marked = _MARK.search(line)
        words = shlex.split(found.group(1), comments=True)
        cut = next((i for i, w in enumerate(words) if w in ("|", ">", ">>")), len(words))
        yield shlex.join(words[:cut]), set(marked.group(1).split(",")) if marked else set()


def all_examples() -> list[tuple[str, str, set[str]]]:
    return [(" ".join(("scaffold", *path)), example, marked) for path, command in commands()
            for example, marked in examples(command.help or "")]


def parse(line: str) -> list[tuple[click.Command, dict[str, Any]]]:
    """The commands an example names, root first, with their parsed parameters (nothing runs)."""
    args = shlex.split(line)[1:]
    chain: list[tuple[click.Command, dict[str, Any]]] = []
    command: click.Command = main
    parent = None
    while True:
        ctx = command.make_context(command.name or "scaffold", args, parent=parent)
        chain.append((command, ctx.params))
        if not isinstance(command, click.Group):
            return chain
        rest = [*ctx._protected_args, *ctx.args]
        _, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None, line
        command, parent = sub, ctx


def local_models(params: dict[str, Any]) -> set[str]:
    """The extras of the local models a command that runs a topology binds (the pocket model: [train])."""
    specs = parse_model_options(params.get("model_values") or ())
    topology = params.get("topology")
    if topology is None:  # serve --config binds in the file; eval --resume as recorded
        return {"train"} if "-pocket-" in (params.get("resume_name") or "") else set()
    if topology not in TOPOLOGIES:  # FILE.py:NAME: only a plain --model surely binds every alias
        return set() if None in specs else {"train"}
    aliases = topology_aliases(topology, split_params([p.split(",")[0] for p in params["params"]]))
    chosen = [specs.get(alias, specs.get(None, "pocket")) for alias in aliases]
    return {"vllm" if spec.startswith("vllm:") else "train" for spec in chosen
            if spec.startswith(("pocket", "transformers:", "vllm:"))}


def needs(chain: list[tuple[click.Command, dict[str, Any]]]) -> set[str]:
    """The extras beyond [api] an example needs, from what it parses to."""
    path = tuple(command.name for command, _ in chain[1:])
    root, (_, params) = chain[0][1], chain[-1]
    found = {"postgres"} if (root.get("target") or "").startswith("postgresql") else set()
    if path in (("pocket", "build"), ("pocket", "agent"), ("train",)):
        found.add("train")
    if path in (("serve",), ("ui",)):
        found.add("serve")
    if "model_values" in params:
        found |= local_models(params)
    if params.get("ray_address") is not None:
        found.add("cluster")
    data = params.get("data") if path == ("eval",) else None
    if data is not None and (data in HUB_DATASETS or data.startswith("hf:")):
        found.add("hub")
    if path == ("runs", "export"):
        fmt = params.get("fmt") or ("parquet" if str(params.get("out")).endswith(".parquet") else "jsonl")
        found |= {"parquet": {"parquet"}, "otlp": {"otel"}}.get(fmt, set())
    return found


@pytest.fixture
def lenient_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths that must exist (a model directory, a training log) need not exist to parse an example."""
    for _, command in commands():
        for param in command.params:
            if isinstance(param.type, click.Path) and param.type.exists:
                monkeypatch.setattr(param.type, "exists", False)


def test_the_first_examples_of_scaffold_run_and_eval_pass_an_api_model() -> None:
    """The first example of `scaffold --help`, `scaffold run --help` and `scaffold eval --help` passes --model and
    needs no extra (and the examples are found at all: every command with any, some forty lines)."""
    shown = {path: list(examples(command.help or "")) for path, command in commands()}
    assert sum(map(len, shown.values())) >= 40
    for path in ((), ("run",), ("eval",)):
        first, marked = shown[path][0]
        assert "--model" in shlex.split(first) and not marked, first
    assert shown[()][0][0] == shown[("run",)][0][0]


@pytest.mark.parametrize(("where", "line", "marked"), all_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_example_parses_and_says_which_extras_it_needs(lenient_paths: None, where: str, line: str,
                                                          marked: set[str]) -> None:
    """Every --help example parses; it is marked `# needs scaffold-sdk[...]` with exactly the extras beyond [api]
    it needs (the pocket model: [train]); its -p names are the topology's current ones, and it builds."""
    chain = parse(line)
    assert needs(chain) == marked, f"{where}: {line}"
    params = chain[-1][1]
    topology = params.get("topology") if "params" in params or chain[-1][0].name == "params" else None
    if topology is not None and topology in TOPOLOGIES:
        values = split_params(params.get("params") or ())
        assert not set(values) & set(RENAMED.get(topology, {})), f"{where}: {line} uses a deprecated name"
        sweeps = [[(key, v) for v in text.split(",")] for key, text in values.items()]
        for combination in itertools.product(*sweeps):
            build_topology(topology, dict(combination))
    elif topology is not None:
        assert ":" in topology, f"{where}: {line}: no topology {topology!r}"


def test_help_texts_name_no_private_module_and_no_deprecated_parameter() -> None:
    """No help text (command or option) points at a private module or shows a renamed -p parameter."""
    old_names = {old for renamed in RENAMED.values() for old in renamed}
    for path, command in commands():
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        for text in texts:
            assert not _PRIVATE.search(text), f"scaffold {' '.join(path)}: {_PRIVATE.search(text)}"
            assert not set(re.findall(r"-p (\w+)=", text)) & old_names, f"scaffold {' '.join(path)}: {text}"


# -- an API-only example, run -----------------------------------------------------------------
def test_the_first_example_runs_on_an_api_only_install(tmp_path: Path) -> None:
    """`scaffold --help`'s first example, pointed at a local OpenAI-compatible server, answers right without torch."""
    first, _ = next(examples(main.help or ""))
    with OpenAIServer(policy=sum_policy, api_key=KEY) as server:
        done = api_only(*shlex.split(first)[1:], "--api-base", server.base_url, cwd=tmp_path,
                        env={"OPENAI_API_KEY": KEY})
        served = len(server.choices_served)
    assert done.returncode == 0, done.stderr[-3000:]
    fields = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert fields["answer"] == "49   (right: reference 49)" and fields["calls"] == "solver=8" and served == 8
    assert fields["models"] == "solver: openai/gpt-4o-mini"


def test_eval_out_writes_its_tables_without_matplotlib(tmp_path: Path) -> None:
    """`eval --out` on an API-only install writes the report and tables, says the plots need [plot], and exits 0."""
    with OpenAIServer(policy=sum_policy, api_key=KEY) as server:
        done = api_only("eval", "self_consistency", "--model", "openai/gpt-4o-mini", "-p", "n=2", "--limit", "2",
                        "--out", "out", "--no-progress", "--api-base", server.base_url, cwd=tmp_path,
                        env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no plots: they need matplotlib (pip install 'scaffold-sdk[plot]')" in done.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["compare.csv", "compare.md", "problems.csv", "report.json"]
