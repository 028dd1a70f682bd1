"""The server config (TOML, pydantic): errors that name the field, shared models, the one-line form of
`scaffold serve`, the pocket model served end to end with no key, graceful shutdown, and keys kept secret."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import wait_until

import scaffold as sf
from scaffold.serve import ConfigError, ServerConfig, ServeThread, build_app, load_server
from scaffold.testing import OpenAIServer

ANSWER = r"so the answer is \boxed{4}"


@pytest.mark.parametrize(("text", "fragment"), [
    ('[served.a]\ntopology = "rsa"\ntimeout = "30"\n', "`served.a.timeout`: Input should be a valid number"),
    ('[served.a]\ntopology = "rsa"\nmax_n = 0\n', "`served.a.max_n`: Input should be greater than or equal to 1"),
    ('[served.a]\ntopology = "rsa"\nsampling = ["temprature"]\n', "unknown field(s) temprature"),
    ('[served.a]\ntopology = "rsa"\ncontext = "squash"\n', "`served.a.context`"),
    ('[served.a]\ntopology = "rsa"\nbogus = 1\n', "`served.a.bogus`: Extra inputs are not permitted"),
    ('[server]\nport = 70000\n[served.a]\ntopology = "rsa"\n', "`server.port`"),
    ('[models.m]\nmodel = "hosted_vllm/x"\nmax_in_flight = "8"\n[served.a]\ntopology = "rsa"\n',
     "`models.m.max_in_flight`: Input should be a valid integer"),
    ('[served.a]\ntopology = "rsa"\n[served.a.models.solver]\nmodel = "hosted_vllm/x"\ntemprature = 1\n',
     "unknown setting(s) temprature"),
    ("[server]\n", "`served`: Field required"),
    ("served = 3", "`served`"),
    ("[served\n", "not valid TOML"),
])
def test_config_mistakes_name_the_field(tmp_path, text, fragment):
    """Wrong types, unknown keys and bad TOML in a server config are ConfigErrors naming the field."""
    path = tmp_path / "serve.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        ServerConfig.load(path)
    assert fragment in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize(("served", "fragment"), [
    ({"topology": "nope"}, "unknown topology 'nope'"),
    ({"topology": "rsa", "params": {"nope": 1}}, "has no parameter 'nope'"),
    ({"topology": "rsa", "models": {"judge": "hosted_vllm/x"}}, "has no model alias judge"),
    ({"topology": "rsa", "models": {"solver": "no-such-provider/x"}}, "unknown model"),
    ({"topology": "rsa", "models": {"solver": "hosted_vllm/x"}, "request_params": ["nope"]},
     "`request_params` names unknown parameter(s) nope"),
    ({"topology": "rsa", "models": {"solver": "hosted_vllm/x"}, "tools": True}, "needs a graph with a `tools` input"),
])
def test_configs_that_cannot_be_served_fail_before_the_server_starts(served, fragment):
    """A bad topology, parameter, alias, model or setting is a one-line ConfigError at load time."""
    with pytest.raises(ConfigError, match="served model 'a'") as caught:
        load_server({"served": {"a": served}}, store="none")
    assert fragment in str(caught.value)


def test_a_models_table_is_shared_by_every_served_graph_that_names_it():
    """Two served graphs naming one [models] entry share one Model, so its in-flight limit is shared too."""
    served = load_server({
        "models": {"mini": {"model": "hosted_vllm/x", "max_in_flight": 3}},
        "served": {"a": {"topology": "rsa", "models": {"solver": "mini"}},
                   "b": {"topology": "self_consistency", "models": {"solver": "mini"}},
                   "c": {"topology": "self_consistency", "models": {"solver": {"model": "hosted_vllm/y"}}}},
    }, store="none")
    assert served["a"].models["solver"] is served["b"].models["solver"]
    assert served["a"].models["solver"].limit.limit == 3
    assert served["c"].models["solver"] is not served["a"].models["solver"]


def test_conversations_reach_graphs_that_take_them(tmp_path):
    """A graph with `system` and `history` inputs gets the system message and earlier turns, not a fold."""
    graph_file = tmp_path / "chat_graph.py"
    graph_file.write_text(
        "import scaffold as sf\n\n"
        "@sf.graph\n"
        "def chat(problem, system, history):\n"
        "    return sf.generate('{system}|{history}|{problem}', model='solver')\n")
    with OpenAIServer(policy=lambda request: request.prompt_text) as upstream:
        app = build_app({"served": {"chat": {"topology": f"{graph_file}:chat",
                                             "models": {"solver": {"model": "hosted_vllm/m",
                                                                   "api_base": upstream.base_url}}}}}, store="none")
        with ServeThread(app) as server:
            reply = httpx.post(server.base_url + "/chat/completions", timeout=30, json={"model": "chat", "messages": [
                {"role": "system", "content": "S"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"}]}).json()
    assert "S|user: first\nassistant: reply|second" in reply["choices"][0]["message"]["content"]


def test_the_pocket_model_is_served_end_to_end_with_no_key(pocket_quick):
    """`single_sample` on a pocket model: the openai SDK gets its answer, streamed token by token and not."""
    import openai

    directory, _ = pocket_quick
    app = build_app({"served": {"pocket": {"topology": "single_sample", "models": {"solver": f"pocket:{directory}"}}}},
                    store="none")
    served = app.state.served["pocket"]
    assert served.prompts == "pocket"  # every alias is a pocket model: its own prompts
    with ServeThread(app) as server, openai.OpenAI(base_url=server.base_url, api_key="unused") as client:
        problem = "12+345+678"
        reply = client.chat.completions.create(model="pocket", messages=[{"role": "user", "content": problem}])
        pieces = [c.choices[0].delta.content for c in client.chat.completions.create(
            model="pocket", messages=[{"role": "user", "content": problem}], stream=True) if c.choices]
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    text = [p for p in pieces if p]
    assert len(text) > 3 and "".join(text).strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    """Whether something accepts connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except OSError:
        return False


def _wait_healthy(url: str, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited: {process.stderr.read() if process.stderr else ''}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("the server never became healthy")


@pytest.mark.slow
def test_the_cli_serves_one_topology_and_drains_in_flight_requests_on_sigterm(tmp_path):
    """`scaffold serve TOPOLOGY` in one line; SIGTERM lets the request in flight finish, then exits cleanly,
    and the API key never reaches its output or the store.

    The upstream model holds its answers until the server has taken the signal (it stops listening), so the
    request is in flight for the whole drain on any machine."""
    key = "sk-cli-serve-secret-0123456789"
    store = tmp_path / "cli.db"
    port = _free_port()
    release = threading.Event()

    async def held(request):
        await asyncio.to_thread(release.wait, 120)
        return ANSWER

    with OpenAIServer(policy=held) as upstream:
        env = {**os.environ, "MY_SERVE_KEYS": key}
        process = subprocess.Popen(
            [sys.executable, "-m", "scaffold", "--store", str(store), "serve", "self_consistency", "-p", "n=2",
             "--name", "sc", "--model", "solver=hosted_vllm/m", "--api-base", upstream.base_url,
             "--port", str(port), "--api-keys-env", "MY_SERVE_KEYS"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url, process)
            answers = []
            request = threading.Thread(target=lambda: answers.append(httpx.post(
                url + "/v1/chat/completions", timeout=30, headers={"authorization": f"Bearer {key}"},
                json={"model": "sc", "messages": [{"role": "user", "content": "2+2?"}]})))
            request.start()
            wait_until(lambda: upstream.requests, timeout=60, message="the request never reached the upstream model")
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: not _listening(port), timeout=60, message="the server never took the SIGTERM")
            assert request.is_alive() and not answers  # still in flight while the server drains
            release.set()
            request.join(60)
            out, err = process.communicate(timeout=60)
        finally:
            release.set()
            if process.poll() is None:
                process.kill()
    assert process.returncode in (0, -signal.SIGTERM), err  # uvicorn re-raises the signal once it has drained
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == ANSWER
    assert "serving sc at" in err and key not in out + err
    assert key.encode() not in Path(store).read_bytes()
    with sf.Store(str(store)) as recorded:
        (run,) = recorded.runs()
    assert run.status == "ok" and run.calls == 2


def test_serve_check_prints_the_served_models_and_refuses_bad_command_lines(tmp_path):
    """--check builds everything and prints it as JSON; a topology with --config is a usage error."""
    from click.testing import CliRunner

    from scaffold.cli import main

    runner = CliRunner()
    result = runner.invoke(main, ["--store", str(tmp_path / "x.db"), "serve", "rsa", "-p", "population=4",
                                  "--model", "solver=hosted_vllm/x", "--name", "rsa-mini", "--check"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert listing["served"]["rsa-mini"]["calls"] == {"solver": 4 + 4 * 10} and listing["auth"] is False
    assert "warning: parameter 'population' of 'rsa' is deprecated; use 'n'" in result.stderr
    both = runner.invoke(main, ["serve", "rsa", "--config", str(tmp_path / "c.toml")])
    assert both.exit_code != 0 and "one of them" in both.output
    unset = runner.invoke(main, ["serve", "rsa", "--model", "solver=hosted_vllm/x", "--api-keys-env",
                                 "SCAFFOLD_NO_SUCH_VARIABLE", "--check"])
    assert unset.exit_code != 0 and "is not set" in unset.output
