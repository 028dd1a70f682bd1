"""The docs site builds in strict mode, its reference lists every public name, and every code block of the
docs and the README runs as written (``tests/docs_blocks.py`` says how a page's blocks are run).

Blocks that call an API model reach a local OpenAI-compatible test server: ``OPENAI_BASE_URL`` and
``OPENAI_API_BASE`` point at it, so ``"openai/gpt-4o-mini"``, ``--model openai/gpt-4o-mini`` and the
``openai`` SDK all do. It answers every request with a short solution ending in ``\\boxed{42}``.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_blocks import DOCS, ROOT, SHOWN, Block, blocks, needs, pages
from docs_layout import PAGE as LAYOUT_PAGE
from docs_layout import files as layout_files
from docs_layout import page as layout_page
from docs_reference import PACKAGES
from docs_reference import pages as reference_pages

from scaffold.testing import OpenAIServer

NOT_RUN: list[tuple[str, str]] = sorted([
    ('README.md', 'a server that runs until stopped; tests/test_readme.py runs the client below against it'),
    ('README.md', 'installs packages'),
    ('README.md', 'needs the server above; tests/test_readme.py runs it against a served pocket model'),
    ('README.md', 'sets up .venv and installs; make test is what CI runs'),
    ('docs/contributing.md', 'installs everything and runs the whole suite, about 24 minutes on 2 cores'),
    ('docs/getting-started.md', 'installs packages'),
    ('docs/getting-started.md', 'installs packages'),
    ('docs/getting-started.md', 'sets up .venv and installs; the demo takes minutes'),
    ('docs/guides/cluster.md', 'needs a running Ray cluster and a PostgreSQL server'),
    ('docs/guides/cluster.md',
     'the first needs a running Ray cluster and PostgreSQL; the second repeats the local Ray run above'),
    ('docs/guides/mixture-of-agents.md', "calls Anthropic's and Google's own APIs"),
    ('docs/guides/models.md', 'needs an Anthropic key, a running vLLM server and a local model directory'),
    ('docs/guides/models.md', 'starts a vLLM server: needs vLLM and a model, minutes on a CPU'),
    ('docs/guides/recording.md', 'a server that runs until stopped'),
    ('docs/guides/serving.md', 'servers that run until stopped; the blocks below start one from Python instead'),
    ('docs/guides/training-agents.md',
     'the experiment: about ten minutes on two cores; its quick form runs in tests/test_examples_and_benchmarks.py'),
    ('docs/guides/training.md', 'each trains for minutes; the Python run above is the quick version'),
    ('docs/guides/training.md', 'starts Ray rollout workers that each load the model and train for 30 steps'),
    ('docs/results/benchmarks.md', 'each benchmark takes minutes; make also installs packages'),
    ('docs/results/demo.md', 'needs a hosted API model or a vLLM server, and 100 problems take minutes'),
    ('docs/results/demo.md', 'sets up .venv, installs packages and builds the pocket model: minutes'),
    ('docs/results/set-rl.md', 'the full plan takes hours of 2-core compute, in chunks; --quick takes 10 minutes'),
    ('docs/results/set-rl.md', 'trains four recipes: 85 minutes on 2 cores, 9 with --quick'),
    ('docs/results/set-rl.md', 'trains three recipes: 10 minutes on 2 cores'),
])
"""Every block left out (page, reason): a new one fails ``test_the_blocks_left_out_are_the_listed_ones``."""

ANSWER = "Adding the numbers column by column gives 42.\nScore: 8\n\\boxed{42}"


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT) if page.is_relative_to(ROOT) else page)


PAGES = pages()
PLAIN = [p for p in PAGES if not needs(p)]
QUICK = [p for p in PAGES if needs(p) == "quick pocket"]
DEFAULT = [p for p in PAGES if needs(p) == "pocket"]
AGENT = [p for p in PAGES if needs(p) == "pocket agent"]


@pytest.fixture(scope="module")
def docs_server() -> Iterator[OpenAIServer]:
    with OpenAIServer(lambda request: ANSWER, model_name="gpt-4o-mini") as server:
        yield server


def run_page(page: Path, server: OpenAIServer, workdir: Path, cache: Path | None = None) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "SCAFFOLD_STORE"))}
    env.update(SCAFFOLD_STORE=str(workdir / "scaffold.db"), OPENAI_API_KEY="sk-docs-test",
               OPENAI_BASE_URL=server.base_url, OPENAI_API_BASE=server.base_url,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), MPLBACKEND="Agg")
    if cache is not None:
        env["SCAFFOLD_CACHE"] = str(cache)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "docs_blocks.py"), str(page), str(workdir)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{page_id(page)}:\n{done.stderr[-6000:]}\n{done.stdout[-2000:]}"


def pocket_cache(tmp_path: Path, **models: Path) -> Path:
    """A cache directory holding the session's pocket builds where ``pocket_model(config=...)`` looks."""
    from scaffold.pocket import PocketAgentConfig, PocketConfig

    names = {"default": PocketConfig().fingerprint(), "quick": PocketConfig.quick().fingerprint(),
             "agent": f"agent-{PocketAgentConfig().fingerprint()}"}
    root = tmp_path / "cache" / "pocket"
    root.mkdir(parents=True)
    for name, directory in models.items():
        (root / names[name]).symlink_to(directory, target_is_directory=True)
    return tmp_path / "cache"


@pytest.mark.parametrize("page", PLAIN, ids=page_id)
def test_a_docs_page_runs_as_written(page: Path, docs_server: OpenAIServer, tmp_path: Path) -> None:
    run_page(page, docs_server, tmp_path)


@pytest.mark.parametrize("page", QUICK, ids=page_id)
def test_a_docs_page_on_the_quick_pocket_model_runs_as_written(page: Path, docs_server: OpenAIServer,
                                                                pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    run_page(page, docs_server, tmp_path, pocket_cache(tmp_path, quick=pocket_quick[0]))


@pytest.mark.parametrize("page", DEFAULT, ids=page_id)
def test_a_docs_page_on_the_pocket_model_runs_as_written(page: Path, docs_server: OpenAIServer,
                                                          pocket_quick: tuple[Path, Any],
                                                          pocket_default: tuple[Path, Any], tmp_path: Path) -> None:
    run_page(page, docs_server, tmp_path, pocket_cache(tmp_path, quick=pocket_quick[0], default=pocket_default[0]))


@pytest.mark.parametrize("page", AGENT, ids=page_id)
def test_a_docs_page_on_the_pocket_agent_runs_as_written(page: Path, docs_server: OpenAIServer,
                                                         pocket_agent_build: tuple[Path, Path], tmp_path: Path) -> None:
    run_page(page, docs_server, tmp_path, pocket_cache(tmp_path, agent=pocket_agent_build[1]))


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def test_the_blocks_left_out_are_the_listed_ones() -> None:
    """A block marked ``not run`` is in :data:`NOT_RUN` with its reason, and every listed one still exists."""
    left_out = sorted((page_id(b.page), b.arg) for b in every_block() if b.marker == "not run")
    assert left_out == NOT_RUN, (f"newly left out: {sorted(set(left_out) - set(NOT_RUN))}; "
                                 f"listed but gone: {sorted(set(NOT_RUN) - set(left_out))}")
    assert all(reason for _, reason in left_out), "a block left out must say why"


def test_every_block_is_run_or_says_what_it_is() -> None:
    """Every fence is python, bash or toml (run), text, console or mermaid (shown), or a marked file."""
    unknown = [b.where for b in every_block() if b.lang not in (*SHOWN, "python", "bash", "toml") and not b.marker]
    assert unknown == []
    files = [b for b in every_block() if b.marker == "file"]
    assert all(b.arg and "/" not in b.arg for b in files), [b.where for b in files if not b.arg or "/" in b.arg]


def test_the_block_reader_sees_indented_fences_and_markers(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# T\n\n- item:\n\n  <!-- docs: file models.toml -->\n  ```toml\n  [models.a]\n  model = 'x'\n"
                    "  ```\n\n<!-- docs: not run (needs a GPU) -->\n```bash\nnvidia-smi\n```\n\n````text\n```\n````\n")
    found = blocks(page)
    assert [(b.lang, b.marker, b.arg, b.line) for b in found] == [
        ("toml", "file", "models.toml", 6), ("bash", "not run", "needs a GPU", 12), ("text", "", "", 16)]
    assert found[0].code == "[models.a]\nmodel = 'x'\n"
    assert found[2].code == "```\n"


def test_the_reference_pages_are_made_from_the_public_names() -> None:
    """``docs/reference/`` is what ``python tests/docs_reference.py --write`` makes from each ``__all__``."""
    stale = [str(path.relative_to(ROOT)) for path, text in reference_pages().items()
             if not path.is_file() or path.read_text() != text]
    assert stale == [], f"run `python tests/docs_reference.py --write`: {stale}"


def test_the_layout_page_is_made_from_the_floor_plan_and_every_modules_docstring() -> None:
    """``docs/layout.md`` is what ``python tests/docs_layout.py --write`` makes: every module of the tree is on it,
    on its floor, described by its own docstring (a module added or moved makes it stale)."""
    made = layout_page()
    assert LAYOUT_PAGE.read_text() == made, "run `python tests/docs_layout.py --write`"
    missing = [str(p.relative_to(ROOT)) for p in layout_files() if f"`{p.relative_to(ROOT)}`" not in made]
    assert missing == [] and len(layout_files()) > 150
    assert "(no docstring)" not in made


def inventory(site: Path) -> set[str]:
    """The object names in a built site's ``objects.inv`` (Sphinx's inventory format, version 2)."""
    raw = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    text = zlib.decompress(raw[header_end:]).decode()
    return {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}


def test_the_docs_build_in_strict_mode_and_the_reference_lists_every_public_name(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes (no broken link, no missing reference, no docstring it cannot read),
    and the built inventory holds every name of every public package's ``__all__``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q", "-d",
                           str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    names = inventory(tmp_path / "site")
    public = {f"{package}.{name}" for package, _ in PACKAGES.values()
              for name in importlib.import_module(package).__all__}
    assert public - names == set()


def test_no_docs_page_or_readme_names_a_path_outside_the_repository() -> None:
    texts = {page_id(p): p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")]}
    outside = {name for name, text in texts.items() if re.search(r"\.\./shared|shared/data", text)}
    assert outside == set()
