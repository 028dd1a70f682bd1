"""``scaffold serve``: serve topologies as OpenAI-compatible models (see :mod:`scaffold.serve`).

Either one topology from the command line, or a TOML config naming several. Every mistake in the
config or the command line is a one-line error before the server starts; ``--check`` stops there.
"""

from __future__ import annotations

import json
from typing import Any

import click

from scaffold.cli._common import StoreHandle
from scaffold.cli._models import parse_model_options
from scaffold.cli._options import split_params


@click.command("serve")
@click.argument("topology", required=False)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="A server config (TOML) naming every served model and its limits: the [server], [models.NAME] "
                   "and [served.NAME] tables of scaffold.serve.ServerConfig (the serving guide shows one).")
@click.option("--name", metavar="NAME", help="The model name clients ask for (default: the topology's name).")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A build parameter of TOPOLOGY (repeatable), e.g. -p n=8 -p steps=3.")
@click.option("--model", "model_values", multiple=True, metavar="[ALIAS=]SPEC",
              help="The model of every alias (SPEC) or one (ALIAS=SPEC), as for `scaffold run`; with --config, "
                   "for the aliases the config leaves unbound. Default: the pocket model (needs "
                   "scaffold-sdk[train]).")
@click.option("--api-base", metavar="URL", help="The OpenAI-compatible server of the API models.")
@click.option("--prompts", type=click.Choice(["pocket", "generic"]), help="The pocket model's prompts or the "
              "topology's own (default: pocket when every alias runs on a pocket model).")
@click.option("--sampling", metavar="FIELDS", help="Request fields handed to every model call, comma-separated "
              "(temperature,max_tokens,...); default none.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds per request.")
@click.option("--max-calls", type=click.IntRange(min=1), metavar="N",
              help="Most model calls one request may make (its n runs, loops at their bound); default 1000.")
@click.option("--max-param", "max_params", multiple=True, metavar="KEY=N",
              help="Let requests raise integer parameter KEY up to N (repeatable); by default a request may only "
                   "lower the served values (-p).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host header the server answers (repeatable; '*.example.com', '*' for any). Default: the "
                   "loopback names when bound to loopback, any name otherwise.")
@click.option("--host", metavar="HOST", help="Default: the config's, else 127.0.0.1.")
@click.option("--port", type=click.IntRange(0, 65535), help="Default: the config's, else 8000.")
@click.option("--api-keys-env", metavar="VAR", help="Accept the API keys in $VAR (comma-separated).")
@click.option("--api-keys-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Accept the API keys in FILE (one per line).")
@click.option("--check", is_flag=True, help="Build and check everything, print the served models, and exit.")
@click.pass_obj
def serve_command(handle: StoreHandle, topology: str | None, config_path: str | None, name: str | None,
                  params: tuple[str, ...], model_values: tuple[str, ...], api_base: str | None, prompts: str | None,
                  sampling: str | None, timeout: float | None, max_calls: int | None, max_params: tuple[str, ...],
                  allowed_hosts: tuple[str, ...], host: str | None, port: int | None,
                  api_keys_env: str | None, api_keys_file: str | None, check: bool) -> None:
    """Serve TOPOLOGY (or every model of --config) as an OpenAI-compatible API.

    Clients change their base URL to http://HOST:PORT/v1 and their model to NAME; each request runs the
    graph (n: that many runs, concurrently), streams the final node's tokens when asked, and is recorded
    in the store (`scaffold runs show RUN`, the run id is in the x-scaffold-run-id header). Per request,
    `extra_body={"scaffold": {"params": {...}}}` sets build parameters.

    Needs pip install 'scaffold-sdk[serve]' (FastAPI and uvicorn).

    \b
    Examples:
      scaffold serve rsa --model solver=openai/gpt-4o-mini -p n=8 --name rsa-mini   # needs scaffold-sdk[serve]
      scaffold serve mixture_of_agents --model hosted_vllm/qwen \\
          --api-base http://127.0.0.1:8001/v1                                       # needs scaffold-sdk[serve]
      scaffold serve --config serve.toml --api-keys-env SCAFFOLD_API_KEYS           # needs scaffold-sdk[serve]
      scaffold serve single_sample --model pocket --port 8000                       # needs scaffold-sdk[serve,train]
    """
    from scaffold.serve import ConfigError, ServerConfig

    if (topology is None) == (config_path is None):
        raise click.UsageError("give a TOPOLOGY or --config FILE (one of them)")
    if config_path is not None and (params or name or sampling or timeout or prompts or max_calls or max_params):
        raise click.UsageError("-p, --name, --prompts, --sampling, --timeout, --max-calls and --max-param go with "
                               "a TOPOLOGY; put them in the config's [served.NAME] table")
    try:
        if config_path is not None:
            config = ServerConfig.load(config_path)
        else:
            assert topology is not None
            served: dict[str, Any] = {"topology": topology, "params": split_params(params)}
            if prompts:
                served["prompts"] = prompts
            if sampling:
                served["sampling"] = [f.strip() for f in sampling.split(",") if f.strip()]
            if timeout is not None:
                served["timeout"] = timeout
            if max_calls is not None:
                served["max_calls"] = max_calls
            if max_params:
                served["max_params"] = _int_params(max_params)
            config = ServerConfig.parse({"served": {name or topology.rpartition(":")[2]: served}})
        server = config.server.model_copy(update={k: v for k, v in (
            ("host", host), ("port", port), ("api_keys_env", api_keys_env), ("api_keys_file", api_keys_file),
            ("allowed_hosts", list(allowed_hosts) or None)) if v is not None})
        config = config.model_copy(update={"server": server})
        from scaffold.serve import api_keys, build_app

        keys = api_keys(server.api_keys_env, server.api_keys_file)
        store = server.store if server.store is not None else (handle.target if handle.target is not None else "none")
        defaults = parse_model_options(model_values)
        app = build_app(config, store=store, defaults=defaults, api_base=api_base, keys=keys)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    listing = {name: app.state.handlers.describe(name)["scaffold"] for name in app.state.served}
    if check:
        click.echo(json.dumps({"served": listing, "auth": bool(keys)}, indent=2))
        return
    from scaffold.serve._http import is_loopback
    from scaffold.serve._server import run_app, warn_open

    if not is_loopback(server.host) and not keys:
        warn_open("scaffold serve", server.host, "run its graphs and spend on its models")
    where = f"http://{server.host}:{server.port}/v1"
    click.echo(f"serving {', '.join(listing)} at {where}" + (" (API keys required)" if keys else ""), err=True)
    run_app(app, host=server.host, port=server.port, shutdown_timeout=server.shutdown_timeout, log_level="warning")


def _int_params(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        key, sep, number = value.partition("=")
        if not sep or not key.strip() or not number.strip().lstrip("-").isdigit():
            raise click.BadParameter(f"{value!r}: write KEY=N with an integer N", param_hint="--max-param")
        out[key.strip()] = int(number)
    return out
