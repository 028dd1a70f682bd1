"""Shared fixtures: scripted backends for the real executor (see ``helpers`` for plain functions).

Also the session's rules for every test:

* **seeds**: before each test sets up, and again as it starts, ``random``, numpy and torch (those imported) are
  seeded from ``$SCAFFOLD_TEST_SEED`` (default :data:`DEFAULT_SEED`) mixed with the test's node id, so a test draws
  the same numbers alone or in the suite; a failed test's report names its seed. Hypothesis tests draw their
  examples from the same per-test seed (the ``scaffold`` settings profile derandomizes the rest);
* **no silent skip for a missing package in CI**: with ``CI=true``, a test (or module) that
  ``pytest.importorskip`` skips because a package does not import fails instead: ``make install`` provides every
  package the suite imports, so such a skip would hide a broken install. GPU and platform skips stay skips;
* **processes**: a test counts and signals only processes this session started
  (:func:`started_processes`), never the machine's.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from background_builds import ENV as BUILDS_ENV
from background_builds import Builds
from helpers import boxed, numbered_script

from scaffold.store import close_stores
from scaffold.testing import ScriptedBackend

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_SEED = 20240611
"""The base of every test's seed when ``$SCAFFOLD_TEST_SEED`` is not set."""
BASE_SEED = int(os.environ.get("SCAFFOLD_TEST_SEED") or DEFAULT_SEED)
CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
"""Whether this session runs in CI (``CI=true``): a skip for a package that does not import fails there."""
SEED = pytest.StashKey[int]()


def seed_of(nodeid: str) -> int:
    """The seed of the test ``nodeid``: :data:`BASE_SEED` mixed with the node id (below 2**32, as numpy wants).

    pytest-xdist's ``loadgroup`` appends ``@GROUP`` to a grouped test's node id; the seed is the plain id's.
    """
    for group in XDIST_GROUPS:
        nodeid = nodeid.removesuffix(f"@{group}")
    return int.from_bytes(hashlib.sha256(f"{BASE_SEED}/{nodeid}".encode()).digest()[:4], "big")


def seed_everything(seed: int) -> None:
    """Seed ``random``, and numpy's and torch's global generators when those modules are imported."""
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Seed the test's draws before any of its fixtures is set up (a module fixture it is the first to use too)."""
    item.stash[SEED] = seed = seed_of(item.nodeid)
    seed_everything(seed)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Seed again as the test itself starts: what it draws does not depend on which fixtures were set up for it
    (a module's fixtures are set up for its first test only), so it draws the same alone or in the suite."""
    seed_everything(item.stash[SEED])


def _hypothesis_profile() -> None:
    """The ``scaffold`` Hypothesis profile: examples drawn from a fixed seed, so CI is reproducible; the example
    counts stay those each test sets. Top-level ``@given`` tests are seeded per test in
    :func:`pytest_collection_modifyitems` (from ``$SCAFFOLD_TEST_SEED``); ``derandomize`` covers those a test
    builds inside itself."""
    try:
        from hypothesis import settings
    except ImportError:  # the suite imports it where it needs it (and fails loudly there in CI)
        return
    settings.register_profile("scaffold", derandomize=True)
    settings.load_profile("scaffold")


_hypothesis_profile()


def _seed_hypothesis_tests(items: list[pytest.Item]) -> None:
    """Seed every top-level Hypothesis test with its own test seed (``hypothesis.seed``)."""
    if "hypothesis" not in sys.modules:
        return
    from hypothesis import seed as hypothesis_seed

    for item in items:
        function = getattr(item, "function", None)
        if getattr(function, "is_hypothesis_test", False):
            hypothesis_seed(seed_of(item.nodeid))(function)


def _missing_package(message: str) -> bool:
    """Whether a skip's message is ``pytest.importorskip``'s for a module that did not import."""
    return message.removeprefix("Skipped: ").startswith("could not import ")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Name a failed test's seed in its report; with ``CI=true``, fail a test skipped for a missing package."""
    report = yield
    if CI and report.skipped and call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception):
        message = str(call.excinfo.value.msg)
        if _missing_package(message):
            report.outcome = "failed"
            report.longrepr = f"{message}\nCI=true: every package `make install` provides must import here"
    if report.failed and SEED in item.stash:
        report.sections.append(("seed", f"random, numpy and torch were seeded with {item.stash[SEED]}: "
                                        f"SCAFFOLD_TEST_SEED={BASE_SEED} mixed with this test's node id"))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """With ``CI=true``, a module that ``pytest.importorskip`` skips at import (a missing package) fails."""
    report = yield
    if CI and report.skipped and isinstance(report.longrepr, tuple) and _missing_package(str(report.longrepr[2])):
        report.outcome = "failed"
        report.longrepr = f"{report.longrepr[2]}\nCI=true: every package `make install` provides must import here"
    return report


def started_processes(title: str) -> list[Any]:
    """This session's processes whose command line contains ``title`` (``psutil.Process`` objects).

    Only descendants of the test process: what it started, and what those started (the session's Ray cluster
    is started here, so its actors are found here, titled ``ray::ClassName``), never another program's.
    """
    import psutil

    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE and any(title in part for part in process.cmdline()):
                found.append(process)
        except psutil.Error:  # ended meanwhile
            continue
    return found


def assert_pocket_counts(figures: Mapping[str, float], problems: int, *, samples: int = 8, k: int = 4) -> None:
    """What a pocket model's held-out figures are on every CPU, whatever it learned: counts over ``problems``.

    ``pass1`` counts right samples of ``problems * samples``; ``pass8`` and ``maj8`` count problems; ``maj4`` and
    ``agg4`` count groups of ``k``. A problem's majority (of any group) is right only if one of its samples is,
    and one right sample of ``samples`` is a pass@1 of at least 1/``samples``.
    """
    groups = problems * (samples // k)
    units = {"pass1": problems * samples, "pass8": problems, "maj8": problems, "maj4": groups, "agg4": groups}
    for name, unit in units.items():
        count = figures[name] * unit
        assert 0 <= count <= unit and abs(count - round(count)) < 1e-6, (name, figures[name], f"a count of {unit}")
    pass1, pass8 = figures["pass1"], figures["pass8"]
    assert max(pass1, figures["maj8"], figures["maj4"]) <= pass8 <= samples * pass1 + 1e-9, figures


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
"""The session's pocket builds: attached to when ``.ci/test.sh`` started them (or, under pytest-xdist, when the
controller made their directory), else started after collection."""
RAY_GROUP = "ray"
"""The pytest-xdist group of every test that uses the session's Ray cluster: one worker runs them all, so one
cluster starts (``--dist loadgroup``)."""
XDIST_GROUPS = (RAY_GROUP, "vllm", "parts")
"""Every pytest-xdist group of the suite (a module whose fixtures start something costly, a vLLM engine and
server, marks itself ``xdist_group``, so one worker starts it once)."""


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller makes the builds' directory for its workers, which attach to it."""
    global BUILDS
    xdist_controller = (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
                        and bool(config.getoption("numprocesses", None)))
    if xdist_controller and not os.environ.get(BUILDS_ENV):
        BUILDS.close()  # its own empty directory
        BUILDS = Builds(tempfile.mkdtemp(prefix="scaffold-test-pockets-"), owned=True)
        os.environ[BUILDS_ENV] = str(BUILDS.root)  # the workers start after configure, with this environment


def pytest_itemcollected(item: pytest.Item) -> None:
    """Group the tests that use the session's Ray cluster (collection time: before pytest-xdist reads groups)."""
    if _uses(item, "ray_local"):
        item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after ``-k`` and ``-m`` have deselected: only the tests that will run count
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the pocket builds the selected tests will ask for, run the modules that use the session's Ray
    cluster one after the other (it is shut down after the last of them), and the default build's tests last."""
    _seed_hypothesis_tests(items)
    used = {name for item in items for name in getattr(item, "fixturenames", ())}
    BUILDS.start(quick=bool(used & {"pocket_quick_build", "pocket_quick", "grpo_learning"}),
                 default="pocket_default" in used, agent="pocket_agent_build" in used)
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
def pocket_agent_build() -> tuple[Path, Path]:
    """The default pocket agent (``pocket_agent()``), built once per session in the background (about two minutes
    alone on two cores). Returns ``(cache, directory)``: a command given ``SCAFFOLD_CACHE=cache`` finds it."""
    from scaffold.pocket import PocketAgentConfig

    returncode, _, err = BUILDS.agent.result()
    assert returncode == 0, err[-3000:]
    return BUILDS.quick_cache, BUILDS.quick_cache / "pocket" / f"agent-{PocketAgentConfig().fingerprint()}"


@pytest.fixture(scope="session")
def pocket_default() -> Any:
    """The default pocket model (``PocketConfig()``, what ``pocket_model()`` builds), trained once per session.

    About two and a half minutes alone on two cores (portable arithmetic, in a child process), in the background
    from the start of the session; returns ``(directory, BuildReport)``.
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
