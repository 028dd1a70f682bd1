"""The command line's plugins: graphs and trainers join ``scaffold`` through entry points, never by import."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import scaffold.catalogue._plugins as plugins
from scaffold.cli import Registry, main


def test_installed_plugins_supply_the_topologies_and_the_train_command():
    """The project's entry points register graphs.registry as the catalogue and trainers' ``train`` command."""
    import graphs.registry
    import trainers.cli

    registry = plugins.registry()
    assert registry.failed == {}
    assert registry.topologies is graphs.registry
    assert registry.commands["train"] is trainers.cli.train
    assert main.get_command(click.Context(main), "train") is trainers.cli.train


@pytest.mark.parametrize("args", [
    ["graph", "list"],
    ["graph", "params", "rsa"],
    ["graph", "show", "rsa"],
    ["run", "rsa", "--problem", "1+1"],
    ["eval", "rsa", "--limit", "2"],
])
def test_without_topologies_a_command_says_to_install_the_project(monkeypatch, tmp_path: Path, args: list[str]):
    """No plugin supplied topologies: one ``Error:`` line naming ``pip install -e .``, exit 1, no traceback."""
    monkeypatch.setattr(plugins, "_REGISTRY", Registry())
    done = CliRunner().invoke(main, ["--store", str(tmp_path / "runs.db"), *args])
    assert done.exit_code == 1, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    (line,) = done.output.strip().splitlines()
    assert line.startswith("Error: no topologies are installed") and "pip install -e ." in line


def test_a_plugin_that_fails_to_load_is_named_and_the_others_still_load(monkeypatch):
    """A broken entry point is recorded with its error; the commands that need it say so in their one line."""
    entry_points = [
        importlib.metadata.EntryPoint("broken", "scaffold_no_such_module:register", plugins.ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("trainers", "trainers.cli:register", plugins.ENTRY_POINT_GROUP),
    ]
    registry = Registry().load(entry_points)
    assert set(registry.commands) == {"train"} and registry.topologies is None
    assert registry.failed == {"broken": "ModuleNotFoundError: No module named 'scaffold_no_such_module'"}
    monkeypatch.setattr(plugins, "_REGISTRY", registry)
    done = CliRunner().invoke(main, ["graph", "list"])
    assert done.exit_code == 1
    assert "plugin 'broken' failed to load (ModuleNotFoundError" in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_two_plugins_cannot_claim_one_command_name():
    """A second command named like one already registered is refused rather than silently replacing it."""
    registry = Registry()
    registry.add_command(click.Command("hello"))
    with pytest.raises(ValueError, match="name of its own"):
        registry.add_command(click.Command("hello"))


def test_a_third_party_plugin_installed_beside_ours_registers_its_command_and_the_server_sees_the_catalogue(
        monkeypatch, tmp_path: Path):
    """The plugin contract, as a third party meets it: a distribution on the path whose ``entry_points.txt`` names a
    ``register(registry)`` in the ``scaffold.cli`` group is found by ``importlib.metadata``; its command joins the
    registry beside ours, and the catalogue still comes from ``graphs`` (read by the CLI and the server alike)."""
    (tmp_path / "acme_plugin.py").write_text(
        "import click\n\n"
        "@click.command('acme')\n"
        "def acme():\n"
        "    click.echo('acme ran')\n\n"
        "def register(registry):\n"
        "    registry.add_command(acme)\n")
    info = tmp_path / "acme_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\nacme = acme_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(plugins, "_REGISTRY", None)
    registry = plugins.registry()
    assert registry.failed == {}
    assert set(registry.commands) >= {"acme", "train"}
    import graphs.registry
    from scaffold.catalogue import topology_aliases

    assert plugins.topologies() is graphs.registry
    built = graphs.registry.build_topology("self_consistency")
    assert topology_aliases("self_consistency", {}) == sorted(built.aliases)
    done = CliRunner().invoke(registry.commands["acme"])
    assert done.exit_code == 0 and done.output == "acme ran\n"
