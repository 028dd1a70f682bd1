"""`scaffold serve` with real clients over real HTTP: the openai SDK (sync, async, streamed, n>1), litellm,
another Scaffold graph, and the store that records every request. Upstream models are the fault-injecting
OpenAI-compatible test server, reached over HTTP by the native backend."""

from __future__ import annotations

import asyncio
import time

import pytest

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.testing import OpenAIServer

ANSWER = r"so the answer is \boxed{4}"


@pytest.fixture
def upstream():
    with OpenAIServer(policy=ANSWER, token_interval=0.01) as server:
        yield server


INPUT_PRICE, OUTPUT_PRICE = 2.0**-10, 2.0**-9
"""Dollars per token of the priced alias: powers of two, so every cost and every sum of costs is exact."""


def config(upstream: OpenAIServer, **served: dict) -> dict:
    """``up`` is priced; ``unpriced`` is the same upstream with no price given, and ``hosted_vllm/m`` is in no price
    map, so its cost is unknown."""
    entry = {"model": "hosted_vllm/m", "api_base": upstream.base_url, "max_in_flight": 16}
    return {"models": {"up": {**entry, "input_cost_per_token": INPUT_PRICE, "output_cost_per_token": OUTPUT_PRICE},
                       "unpriced": entry},
            "served": served}


@pytest.fixture
def served(upstream, tmp_path):
    """A server with self-MoA (ends in one model call: streams tokens; priced) and self-consistency (ends in a vote;
    its model's price is unknown)."""
    store = tmp_path / "serve.db"
    app = build_app(config(
        upstream,
        moa={"topology": "self_moa", "params": {"n": 3}, "models": {"solver": "up"},
             "sampling": ["temperature", "max_tokens"]},
        vote={"topology": "self_consistency", "params": {"n": 4}, "models": {"solver": "unpriced"},
              "max_params": {"n": 8}},
    ), store=str(store))
    with ServeThread(app) as server:
        server.store_path = store
        yield server


def recorded_usage(store_path, run_ids=None):
    """(prompt tokens, completion tokens, calls) summed over the recorded runs ``run_ids`` (default: every run)."""
    with sf.Store(str(store_path)) as store:
        runs = store.runs() if run_ids is None else [store.run(run_id) for run_id in run_ids]
    return sum(r.prompt_tokens for r in runs), sum(r.completion_tokens for r in runs), sum(r.calls for r in runs)


def test_the_openai_sdk_gets_the_graph_answer_with_usage_over_every_internal_call(served, upstream):
    """A plain chat completion runs the whole graph: 4 upstream calls, usage summed over all of them."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="moa", messages=[{"role": "user", "content": "What is 2+2?"}])
        reply = raw.parse()
        assert reply.choices[0].message.content == ANSWER
        assert reply.model == "moa" and reply.choices[0].finish_reason == "stop"
        assert len(upstream.choices_served) == 4  # 3 samples (one request with n=3) and one aggregation
        run_id = raw.headers["x-scaffold-run-id"]
        prompt, completion, calls = recorded_usage(served.store_path, [run_id])
        assert calls == 4 and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt, completion)
        assert reply.usage.total_tokens == prompt + completion
        extension = reply.model_extra["scaffold"]
        assert extension["run_ids"] == [run_id] and extension["calls"] == 4
        assert set(extension["nodes"]) == {"samples", "final"} and extension["nodes"]["samples"]["calls"] == 3
        cost = prompt * INPUT_PRICE + completion * OUTPUT_PRICE  # every call priced at the configured rates
        assert extension["cost"] == cost and raw.headers["x-scaffold-cost"] == f"{cost:.6f}"


class Rendezvous:
    """An upstream policy that holds each request until ``parties`` requests are upstream at once.

    Requests sent one after another never meet: the first waits ``deadline`` seconds and is then answered (and so
    are the rest, at once), and :attr:`missed` records how many had arrived (the test fails on it, with that count,
    instead of hanging).
    """

    def __init__(self, parties: int, deadline: float = 30.0) -> None:
        self.parties, self.deadline = parties, deadline
        self.arrived = 0
        self.missed: list[int] = []
        self.everyone: asyncio.Event | None = None  # made on the upstream's event loop, where the policy runs

    async def __call__(self, request) -> str:
        if request.choice == 0:  # the policy runs once per choice: count each request once
            self.everyone = self.everyone or asyncio.Event()
            self.arrived += 1
            if self.arrived == self.parties:
                self.everyone.set()
            try:
                await asyncio.wait_for(self.everyone.wait(), self.deadline)
            except TimeoutError:
                self.missed.append(self.arrived)
                self.everyone.set()  # the later ones need not wait too
        return ANSWER


def test_n_runs_independent_graphs_concurrently(served, upstream):
    """n=3 gives three choices from three recorded runs, sent together rather than one after another: each run's
    one upstream request (n=4) is held until all three are upstream at the same time."""
    import openai

    upstream.policy = meeting = Rendezvous(parties=3)
    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="vote", n=3, messages=[{"role": "user", "content": "2+2?"}])
        reply = raw.parse()
        run_ids = raw.headers["x-scaffold-run-id"].split(",")
        assert [c.index for c in reply.choices] == [0, 1, 2] and len(set(run_ids)) == 3
        assert meeting.missed == [], f"only {meeting.missed[0]} of 3 runs were upstream together: not concurrent"
        assert meeting.arrived == 3 and len(upstream.choices_served) == 12
        prompt, completion, _ = recorded_usage(served.store_path, run_ids)
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt, completion)


def test_a_stream_carries_the_final_calls_tokens_as_they_are_generated(served, upstream):
    """The final aggregation's tokens arrive one by one, the first well before the last; usage comes last.

    The upstream spaces its tokens 0.15 s apart (10 or more: at least 1.35 s from first to last), so only a
    client stalled for over a second could see them arrive within 0.7 s of each other.
    """
    import openai

    upstream.token_interval = 0.15
    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        started = time.perf_counter()
        arrivals, pieces, usage = [], [], None
        for chunk in client.chat.completions.create(model="moa", messages=[{"role": "user", "content": "2+2?"}],
                                                    stream=True, stream_options={"include_usage": True}):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                    arrivals.append(time.perf_counter() - started)
        assert "".join(pieces) == ANSWER and len(pieces) >= 10
        assert arrivals[-1] - arrivals[0] > 0.7, "the tokens arrived together: the stream is not real"
    prompt, completion, calls = recorded_usage(served.store_path)  # the one run this request recorded
    assert calls == 4 and usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)
    assert usage.total_tokens == prompt + completion


def test_a_vote_graph_streams_progress_and_then_its_answer(served):
    """A graph ending in a vote sends progress as reasoning_content when asked, then the chosen text."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        reasoning, content = [], []
        for chunk in client.chat.completions.create(model="vote", messages=[{"role": "user", "content": "2+2?"}],
                                                    stream=True, extra_body={"scaffold": {"progress": True}}):
            for choice in chunk.choices:
                extra = choice.delta.model_extra or {}
                if extra.get("reasoning_content"):
                    reasoning.append(extra["reasoning_content"])
                if choice.delta.content:
                    content.append(choice.delta.content)
        assert "".join(content) == ANSWER
        assert reasoning and "4/4 calls" in reasoning[-1] and "100% agree" in reasoning[-1]


def test_the_async_sdk_streams_and_answers_concurrent_requests_with_their_own_params(served, upstream):
    """Concurrent async requests with different per-request params each run their own build (lowered from the
    served n=4, or raised up to its max_params bound of 8)."""
    import openai

    async def main():
        client = openai.AsyncOpenAI(base_url=served.base_url, api_key="none")

        async def ask(n):
            raw = await client.chat.completions.with_raw_response.create(
                model="vote", messages=[{"role": "user", "content": "2+2?"}],
                extra_body={"scaffold": {"params": {"n": n}}})
            return raw.parse()

        replies = await asyncio.gather(*[ask(n) for n in (1, 2, 5, 7, 2, 1)])
        stream = await client.chat.completions.create(model="moa", stream=True,
                                                      messages=[{"role": "user", "content": "2+2?"}])
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return replies, text

    replies, text = asyncio.run(main())
    assert [r.model_extra["scaffold"]["calls"] for r in replies] == [1, 2, 5, 7, 2, 1]
    assert text == ANSWER


def test_sampling_fields_reach_every_model_call_when_the_config_allows(served, upstream):
    """temperature and max_tokens go to every internal call of `moa`; `vote` refuses them with a 400."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        client.chat.completions.create(model="moa", messages=[{"role": "user", "content": "2+2?"}],
                                       temperature=0.3, max_tokens=50)
        assert [r.request.body["temperature"] for r in upstream.requests] == [0.3] * 2  # samples (n=3), final
        assert all(r.request.body["max_tokens"] == 50 for r in upstream.requests)
        with pytest.raises(openai.BadRequestError, match="does not pass temperature"):
            client.chat.completions.create(model="vote", messages=[{"role": "user", "content": "2+2?"}],
                                           temperature=0.3)


def test_the_completions_endpoint_streams_and_answers(served):
    """/v1/completions takes a prompt, answers in text_completion shape, streamed or not."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        reply = client.completions.create(model="moa", prompt="What is 2+2?")
        assert reply.choices[0].text == ANSWER
        prompt, completion, calls = recorded_usage(served.store_path, reply.model_extra["scaffold"]["run_ids"])
        assert calls == 4 and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt, completion)
        text = "".join(c.choices[0].text for c in client.completions.create(model="moa", prompt="2+2?", stream=True)
                       if c.choices)
        assert text == ANSWER


def test_models_lists_every_served_graph(served):
    """/v1/models names each served model with its topology and what a request may set."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        listed = {m.id: m.model_extra["scaffold"] for m in client.models.list()}
        assert set(listed) == {"moa", "vote"}
        assert listed["vote"]["topology"] == "self_consistency" and "n" in listed["vote"]["request_params"]
        assert listed["moa"]["streams_tokens"] is True and listed["vote"]["streams_tokens"] is False
        assert client.models.retrieve("moa").id == "moa"


def test_litellm_uses_a_served_graph_as_a_model(served):
    """litellm, as a client, gets the answer and exact usage, streamed and not."""
    from scaffold.backends._litellm import import_litellm

    litellm = import_litellm()

    async def main():
        reply = await litellm.acompletion(model="openai/vote", api_base=served.base_url, api_key="none",
                                          messages=[{"role": "user", "content": "2+2?"}])
        stream = await litellm.acompletion(model="openai/moa", api_base=served.base_url, api_key="none",
                                           messages=[{"role": "user", "content": "2+2?"}], stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        from scaffold.backends._litellm import release_litellm_loop

        await release_litellm_loop()
        return reply, text

    reply, text = asyncio.run(main())
    assert reply.choices[0].message.content == ANSWER and text == ANSWER
    run_ids = reply._hidden_params.get("additional_headers", {}).get("x-scaffold-run-id") or \
        reply.model_extra.get("scaffold", {}).get("run_ids", [None])[0]
    assert run_ids is not None
    prompt, completion, calls = recorded_usage(served.store_path, [run_ids.split(",")[0]])
    assert calls == 4 and reply.usage.prompt_tokens == prompt and reply.usage.completion_tokens == completion


def test_rsa_over_a_served_moa_composes(served, upstream):
    """A Scaffold graph whose alias points at the served MoA: every RSA call is a whole MoA run."""

    @sf.graph
    def small_rsa(problem, *, n: int = 2):
        pop = sf.sample("Solve: {problem}", model="solver", n=n)
        pop = sf.aggregate(pop, model="solver", k=2, n=n)
        return sf.vote(pop)

    backend = sf.OpenAIBackend("moa", base_url=served.base_url, api_key="none")
    result = small_rsa.run_sync({"problem": "2+2"}, models={"solver": backend}, store=None)
    assert result.answer == "4"
    assert len(upstream.choices_served) == 4 * 4  # 4 RSA calls, each a 4-call MoA run
    prompt, completion, calls = recorded_usage(served.store_path)  # the usage of each call is its whole MoA run's
    assert calls == 16 and (result.usage.prompt_tokens, result.usage.completion_tokens) == (prompt, completion)


def test_every_request_is_recorded_as_a_run(served):
    """The run id in the header is a run in the store, with the request's problem as its input."""
    import openai

    with openai.OpenAI(base_url=served.base_url, api_key="none") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="vote", messages=[{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "What is 2+2?"}])
        run_id = raw.headers["x-scaffold-run-id"]
        with sf.Store(str(served.store_path)) as store:
            info = store.run(run_id)
        assert info.status == "ok" and info.graph == "self_consistency" and info.calls == 4 and info.answer == "4"
        # no price is configured for `unpriced` and hosted_vllm/m is in no price map: unknown, never 0
        assert info.cost is None and raw.headers["x-scaffold-cost"] == "unknown"
        assert raw.parse().model_extra["scaffold"]["cost"] is None
        assert info.inputs["problem"] == "system: Be brief.\nuser: What is 2+2?"  # folded, never dropped
