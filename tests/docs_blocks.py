"""The code blocks of the docs and the README, and how one page's blocks are run (``tests/test_docs.py``).

A page's blocks run in order, like a notebook, in one fresh directory:

- ```` ```python ```` blocks share one namespace; when every top-level ``print(...)`` line of a block ends
  with a ``# comment``, the comments are what it must print, line for line;
- ```` ```bash ```` blocks run with ``bash -e`` (in the repository root instead when they name a file under
  ``examples/``, ``benchmarks/`` or ``docs/``);
- ```` ```toml ```` blocks must parse;
- ```` ```text ````, ```` ```console ```` and ```` ```mermaid ```` blocks are output or pictures, not run.

An HTML comment on the line before a block's fence changes that:

- ``<!-- docs: file NAME -->`` writes the block to ``NAME`` for later blocks, instead of running it;
- ``<!-- docs: not run (REASON) -->`` leaves it out, for a block that cannot run here (a GPU, a hosted
  provider's own API, a server that runs until stopped, an install); ``tests/test_docs.py`` keeps the list.

A page that uses the pocket model says so on a line of its own: ``<!-- docs: needs pocket -->`` (the default
model: ``pocket_model()``), ``<!-- docs: needs quick pocket -->`` or ``<!-- docs: needs pocket agent -->``
(``pocket_agent()``). ``python tests/docs_blocks.py PAGE``
runs one page in the environment the test gives it (see ``tests/test_docs.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

RUN = ("python", "bash", "toml")
SHOWN = ("text", "console", "mermaid", "")
"""Fence languages: run (or parsed), and shown only. Any other language is an error: say which it is."""

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)[^\n]*$")
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(?P<what>not run|file)\s*(?P<arg>.*?)\s*-->\s*$")
NEEDS = re.compile(r"^<!--\s*docs:\s*needs\s+(?P<what>quick pocket|pocket agent|pocket)\s*-->\s*$", re.M)
REPO_PATHS = re.compile(r"(?<![\w/.])(examples|benchmarks|docs)/")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, first line (1-based, the fence's), language, text and marker."""

    page: Path
    line: int
    lang: str
    code: str
    marker: str = ""
    """``""``, ``"not run"`` or ``"file"``."""
    arg: str = ""
    """The reason (``not run``) or the file name (``file``)."""

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, in order (fences indented under list items included)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        start = FENCE.match(lines[i])
        if not start:
            i += 1
            continue
        indent, fence = start["indent"], start["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        arg = ""
        if marker:
            arg = marker["arg"].strip()
            if marker["what"] == "not run":
                arg = arg.removeprefix("(").removesuffix(")").strip()
        found.append(Block(page, i + 1, start["lang"].lower(), "\n".join(body) + "\n",
                           marker["what"] if marker else "", arg))
        i = j + 1
    return found


def needs(page: Path) -> str:
    """``"pocket"``, ``"quick pocket"``, ``"pocket agent"`` or ``""``: the pocket model a page's blocks use."""
    match = NEEDS.search(page.read_text(encoding="utf-8"))
    return match["what"] if match else ""


def pages() -> list[Path]:
    """The README and every docs page with a code block (the generated API reference has none)."""
    found = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.parts)
    return [page for page in found if blocks(page)]


def claims(code: str) -> list[str] | None:
    """What a block's comments say it prints, when every top-level ``print(...)  # output`` line says it."""
    prints = [line for line in code.splitlines() if line.startswith("print(")]
    if not prints or not all(re.search(r"\)\s+# ", line) for line in prints):
        return None
    return [re.split(r"\)\s+# ", line, maxsplit=1)[1].strip() for line in prints]


def run_page(page: Path, workdir: Path) -> None:
    """Run a page's blocks in ``workdir``; raises ``AssertionError`` naming the block that failed."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    os.chdir(workdir)
    for block in blocks(page):
        if block.marker == "not run" or block.lang in SHOWN:
            continue
        if block.marker == "file":
            (workdir / block.arg).write_text(block.code, encoding="utf-8")
            continue
        assert block.lang in RUN, f"{block.where}: a ```{block.lang} block: mark it (see tests/docs_blocks.py)"
        if block.lang == "toml":
            try:
                tomllib.loads(block.code)
            except tomllib.TOMLDecodeError as error:
                raise AssertionError(f"{block.where}: not valid TOML: {error}") from None
        elif block.lang == "python":
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    exec(compile(block.code, block.where, "exec"), namespace)
            except BaseException:
                sys.stdout.write(printed.getvalue())
                raise AssertionError(f"{block.where}: the block failed:\n{traceback.format_exc()}") from None
            sys.stdout.write(printed.getvalue())
            claimed = claims(block.code)
            if claimed is not None:
                shown = printed.getvalue().strip().splitlines()
                assert shown == claimed, f"{block.where}: the block printed {shown}, its comments say {claimed}"
        else:
            cwd = ROOT if REPO_PATHS.search(block.code) else workdir
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=cwd,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (f"{block.where}: exit {done.returncode}\n--- stdout\n"
                                          f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")


def main() -> None:
    page = Path(sys.argv[1]).resolve()
    workdir = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path.cwd()
    try:
        run_page(page, workdir)
    except AssertionError as error:
        print(error, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
