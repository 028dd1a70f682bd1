"""The pocket model on disk: built once per config, then reused.

A build goes into a fresh temporary directory next to its final place and is renamed into
place when complete, so a reader never sees a half-written model; two processes building at
once both finish and the first rename wins (the other copy is discarded).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scaffold.pocket._config import REPORT, PocketConfig
from scaffold.pocket._task import PocketTask


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where pocket models are kept: ``<cache>/pocket``, the cache being ``cache_dir``, else
    ``$SCAFFOLD_CACHE``, else ``~/.cache/scaffold``."""
    if cache_dir is None:
        cache_dir = os.environ.get("SCAFFOLD_CACHE") or Path.home() / ".cache" / "scaffold"
    return Path(cache_dir) / "pocket"


def pocket_model(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    config: PocketConfig | None = None,
    rebuild: bool = False,
    progress: bool = True,
) -> Path:
    """The directory of the pocket model for ``config`` (the default one if ``None``), built on first use.

    The directory is ``<root>/<config fingerprint>`` (see :func:`cache_root`); it holds the model
    and tokenizer (``save_pretrained``), ``scaffold.json`` and ``pocket_report.json``. Building the
    default model takes about three minutes on two CPU cores (in portable arithmetic: see
    :attr:`PocketConfig.portable`); later calls return at once.
    ``rebuild=True`` trains it again and replaces the cached copy.

    Examples:
        >>> import scaffold as sf
        >>> from scaffold.pocket import pocket_model
        >>> backend = sf.TransformersBackend(pocket_model())  # doctest: +SKIP
    """
    from scaffold.pocket._train import build_pocket_model

    config = config or PocketConfig()
    return cached_build(cache_root(cache_dir) / config.fingerprint(),
                        lambda building: build_pocket_model(building, config, progress=progress), rebuild=rebuild)


def cached_build(target: Path, build: Callable[[Path], object], *, rebuild: bool = False) -> Path:
    """``target`` once complete (it holds :data:`REPORT`): built by ``build(directory)`` unless it already is.

    The build writes into a fresh temporary directory beside ``target``, renamed into place when complete.
    """
    if (target / REPORT).is_file() and not rebuild:
        return target
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-building-", dir=root))
    try:
        build(building)
        if target.exists() and (rebuild or not (target / REPORT).is_file()):
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}-stale-", dir=root))
            target.rename(stale / "model")  # replaced, or left incomplete by a crashed build
            shutil.rmtree(stale, ignore_errors=True)
        try:
            building.rename(target)
        except OSError:  # another process put its complete build there meanwhile: keep that one
            if not (target / REPORT).is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``pocket_report.json`` a build saved in a model directory (the :class:`BuildReport` as a dict)."""
    return dict(json.loads((Path(path) / REPORT).read_text()))


def pocket_task(path: str | os.PathLike[str]) -> PocketTask:
    """The task a pocket model directory was trained on (its digits and terms, from ``scaffold.json``).

    Examples:
        >>> pocket_task(pocket_model()).name  # doctest: +SKIP
        '3x3'
    """
    meta_path = Path(path) / "scaffold.json"
    try:
        meta = json.loads(meta_path.read_text())
        config = meta["config"]
        if meta.get("kind") not in ("pocket", "pocket-agent"):
            raise ValueError(f"kind is {meta.get('kind')!r}, not 'pocket' or 'pocket-agent'")
        return PocketTask(digits=int(config["digits"]), terms=int(config["terms"]))
    except FileNotFoundError:
        raise ValueError(f"{path} is not a pocket model directory: it has no scaffold.json") from None
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{meta_path} does not describe a pocket model: {error}") from None
