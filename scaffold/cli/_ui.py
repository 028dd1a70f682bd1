"""``scaffold ui``: the run viewer in a browser (see :mod:`scaffold.ui`), served on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from scaffold.cli._common import StoreHandle


@click.command("ui")
@click.option("--store", "store_target", metavar="PATH_OR_URL",
              help="The store to show (default: the global --store, $SCAFFOLD_STORE or ./scaffold.db).")
@click.option("--host", default="127.0.0.1", show_default=True, metavar="HOST")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
@click.option("--training-log", "training_logs", multiple=True, type=click.Path(dir_okay=False, exists=True),
              metavar="FILE", help="A training log (JSONL, `scaffold train` writes one to --out/log.jsonl) for "
                                   "the Training page (repeatable).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host header the viewer answers (repeatable; '*' for any). Default: the loopback names when "
                   "bound to loopback, any name otherwise.")
@click.pass_obj
def ui_command(handle: StoreHandle, store_target: str | None, host: str, port: int,
               training_logs: tuple[str, ...], allowed_hosts: tuple[str, ...]) -> None:
    """Look at recorded runs in the browser: runs, one run's executed DAG, evaluations side by side, training.

    Everything is served from this machine (no internet needed); open the printed address. Needs
    pip install 'scaffold-sdk[serve]' (the server of `scaffold serve`).

    \b
    Examples:
      scaffold ui                      # ./scaffold.db on http://127.0.0.1:8700; needs scaffold-sdk[serve]
      scaffold ui --store runs.db --port 9000 --training-log out/train/log.jsonl   # needs scaffold-sdk[serve]
    """
    from scaffold.serve._guard import default_hosts
    from scaffold.serve._http import is_loopback
    from scaffold.serve._server import run_app, warn_open
    from scaffold.ui import create_ui_app

    store = (StoreHandle(store_target, "--store") if store_target else handle).open()
    app = create_ui_app(store, training_logs=[Path(p) for p in training_logs],
                        allowed_hosts=list(allowed_hosts) or default_hosts(host))
    if not is_loopback(host):
        warn_open("scaffold ui", host, "read every recorded prompt and answer (the viewer has no keys)")
    click.echo(f"scaffold ui: {store!r} on http://{host}:{port}  (Ctrl-C stops)")
    run_app(app, host=host, port=port, shutdown_timeout=2, log_level="warning")
