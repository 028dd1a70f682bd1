"""Shared fixtures: scripted backends for the real executor (see ``helpers`` for plain functions)."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from background_builds import Builds
from helpers import boxed, numbered_script

from scaffold.store import close_stores
from scaffold.testing import ScriptedBackend

ROOT = Path(__file__).resolve().parent.parent

# Every run records into the default store unless told otherwise. Each test records into its own
# throwaway SQLite file (never ./scaffold.db), so every test also exercises the recording path.
os.environ["SCAFFOLD_STORE"] = os.path.join(tempfile.mkdtemp(prefix="scaffold-test-store-"), "runs.db")


@pytest.fixture(autouse=True)
def _own_default_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SCAFFOLD_STORE", str(tmp_path_factory.mktemp("store") / "runs.db"))
    yield
    close_stores()


@pytest.fixture
def constant() -> Callable[..., ScriptedBackend]:
    """Factory: a backend answering ``\\boxed{answer}`` to everything (extra kwargs go to ScriptedBackend)."""

    def make(answer: object = 7, **kwargs: Any) -> ScriptedBackend:
        return ScriptedBackend(lambda request: boxed(answer), **kwargs)

    return make


@pytest.fixture
def numbered() -> Callable[..., ScriptedBackend]:
    """Factory: a backend whose replies are all different (``draft i``), so lineage can be read from prompts."""

    def make(**kwargs: Any) -> ScriptedBackend:
        return ScriptedBackend(numbered_script(), **kwargs)

    return make


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tiny random Qwen2 chat model saved with ``save_pretrained`` (built once per test session)."""
    from scaffold.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


BUILDS = Builds()
"""The session's pocket builds: attached to when ``.ci/test.sh`` started them, else started after collection."""


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the pocket builds the collected tests will ask for, run the modules that use the session's Ray
    cluster one after the other (it is shut down after the last of them), and the default build's tests last."""
    used = {name for item in items for name in getattr(item, "fixturenames", ())}
    BUILDS.start(quick=bool(used & {"pocket_quick_build", "pocket_quick", "grpo_learning"}),
                 default="pocket_default" in used)
    ray_modules = {item.path for item in items if _uses(item, "ray_local")}
    first_ray = next((i for i, item in enumerate(items) if item.path in ray_modules), len(items))
    position = {id(item): i for i, item in enumerate(items)}  # whole modules move; everything else keeps its order
    items.sort(key=lambda item: (_uses(item, "pocket_default"),
                                 first_ray if item.path in ray_modules else position[id(item)], position[id(item)]))
    global LAST_RAY_TEST
    LAST_RAY_TEST = next((item.nodeid for item in reversed(items) if _uses(item, "ray_local")), None)


LAST_RAY_TEST: str | None = None
"""The last test of the session that uses the Ray cluster; it is shut down after it (it costs CPU when idle)."""


@pytest.hookimpl(trylast=True)  # after the test's own fixtures (its module's actors, say) are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if item.nodeid == LAST_RAY_TEST and "ray" in sys.modules:
        import ray

        ray.shutdown()


def pytest_sessionfinish() -> None:
    BUILDS.close()


@pytest.fixture(scope="session")
def pocket_quick_build() -> tuple[Path, str]:
    """``scaffold pocket build --quick --cache-dir CACHE`` into a fresh cache, once per session (in the background).

    Returns ``(CACHE, what the command printed)``. The command builds ``PocketConfig.quick()`` (portable
    arithmetic), the model :func:`pocket_quick` hands out; the CLI's own test reads this first build and
    then checks that a second command reuses it, so the session trains the quick model once, not once per
    user. A test given ``SCAFFOLD_CACHE=CACHE`` finds it where ``pocket_model(config=PocketConfig.quick())``
    looks.
    """
    returncode, out, err = BUILDS.quick.result()
    assert returncode == 0, err[-3000:]
    return BUILDS.quick_cache, out


@pytest.fixture(scope="session")
def pocket_quick(pocket_quick_build: tuple[Path, str]) -> Any:
    """The seconds-sized pocket model (``PocketConfig.quick()``), trained from scratch once per session.

    Returns ``(directory, BuildReport)``: the model ``pocket_quick_build`` saved in its cache, and the report it saved.
    """
    from scaffold.pocket import BuildReport, PocketConfig, load_report

    cache, _ = pocket_quick_build
    path = cache / "pocket" / PocketConfig.quick().fingerprint()
    return path, BuildReport.from_dict(load_report(path))


@pytest.fixture(scope="session")
def grpo_learning(pocket_quick: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The CI learning run on the quick pocket model, local loop (``helpers.grpo_learning_run``), once per session:
    the local learning test checks its margin and the distributed one compares with it."""
    from helpers import grpo_learning_run

    path, _ = pocket_quick
    return grpo_learning_run(path, log_path=str(tmp_path_factory.mktemp("grpo") / "log.jsonl"))


@pytest.fixture(scope="session")
def pocket_default() -> Any:
    """The default pocket model (``PocketConfig()``, what ``pocket_model()`` builds), trained once per session.

    About ten minutes on two cores (portable arithmetic, in a child process), in the background from the
    start of the session; returns ``(directory, BuildReport)``.
    """
    from scaffold.pocket import BuildReport, load_report

    returncode, _, err = BUILDS.default.result()
    assert returncode == 0, err[-3000:]
    return BUILDS.default_dir, BuildReport.from_dict(load_report(BUILDS.default_dir))


@pytest.fixture
def fast_thread_switching() -> Iterator[None]:
    """Threads switch every microsecond (not every 5 ms), so an unlocked counter would lose updates."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)

# -- stores: every store test runs on SQLite and on a real PostgreSQL server -----------------------
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One throwaway PostgreSQL cluster for the session (``$SCAFFOLD_TEST_POSTGRES_URL`` uses an existing one)."""
    from scaffold.testing import PostgresServer

    if os.environ.get("SCAFFOLD_TEST_POSTGRES_URL"):
        yield None
        return
    with PostgresServer() as server:
        yield server


_database_counter = itertools.count()


def fresh_postgres_database(server: Any) -> str:
    """A new empty database on the session's server; returns its SQLAlchemy URL."""
    import psycopg

    base = os.environ.get("SCAFFOLD_TEST_POSTGRES_URL") or server.url
    admin = base.replace("postgresql+psycopg://", "postgresql://", 1)
    name = f"t{os.getpid()}_{next(_database_counter)}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return base.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The URL of an empty store: a SQLite file, then a fresh database on a real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return fresh_postgres_database(request.getfixturevalue("postgres_server"))


@pytest.fixture
def store(store_url: str) -> Iterator[Any]:
    """An open :class:`scaffold.Store` on ``store_url``, closed after the test."""
    from scaffold.store import Store

    opened = Store(store_url)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real local Ray cluster (4 logical CPUs), started once per session; returns its GCS address.

    Tests in one session share it: every test makes its own actors and kills what it started. Their modules run
    one after another and the cluster is shut down after the last of them (``pytest_runtest_teardown``). Workers
    import this checkout (``PYTHONPATH``) and use one thread each for torch; ``RAY_AUTH_MODE=disabled``
    keeps Ray from writing an auth token under the home directory (FIELD-NOTES).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {"RAY_AUTH_MODE": "disabled", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "OMP_NUM_THREADS": "1", "SCAFFOLD_STORE": os.environ["SCAFFOLD_STORE"]}
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp),
             namespace="scaffold-tests", runtime_env={"env_vars": env})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
