"""One graph, several backends: API proposers and a local aggregator, chosen by one mapping.

Mixture-of-Agents in miniature: three proposals from an "API model", then a local model reads
them and writes one answer. Offline by default: a local OpenAI-compatible server
(``scaffold.testing.OpenAIServer``) stands in for the API over real HTTP, and a tiny random
Hugging Face model (built locally, no download) is the aggregator, so the aggregator's text is
gibberish — the point is the plumbing: limits, retries, token ids, usage and cost per alias.

Point it at real models by changing the mapping only:

    python examples/mixed_backends.py --proposer openai/gpt-4o-mini            # needs OPENAI_API_KEY
    python examples/mixed_backends.py --aggregator hosted_vllm/NAME --api-base http://127.0.0.1:8000/v1
    python examples/mixed_backends.py --aggregator vllm:/path/to/model          # in-process vLLM
    python examples/mixed_backends.py --aggregator transformers:/path/to/model
"""

from __future__ import annotations

import argparse
import tempfile

import scaffold as sf
from scaffold.testing import Fault, OpenAIServer, ServerRequest, build_tiny_model


@sf.graph
def mixture(problem, *, proposals: int = 3):
    drafts = sf.sample("Solve step by step, end with \\boxed{}: {problem}", model="proposer", n=proposals)
    return sf.aggregate(drafts, model="aggregator", logprobs=True,
                        prompt="Problem: {problem}\nProposed solutions:\n{candidates}\nWrite the best solution.")


def stand_in_api(request: ServerRequest) -> str:
    return f"Proposal {request.choice}: 17 + 25 = 42, so the answer is \\boxed{{42}}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="What is 17 + 25?")
    parser.add_argument("--proposer", help="a model name, e.g. openai/gpt-4o-mini (default: a local stand-in server)")
    parser.add_argument("--aggregator", help="a model spec: a model name, transformers:/path or vllm:/path")
    parser.add_argument("--api-base", help="the aggregator's OpenAI-compatible server (e.g. a vLLM server)")
    args = parser.parse_args()

    with OpenAIServer(policy=stand_in_api) as server, tempfile.TemporaryDirectory() as scratch:
        server.inject(Fault.rate_limit(retry_after=0.2))  # the stand-in "API" refuses once; the retry recovers
        # the stand-in plays OpenAI's gpt-4o-mini: price_by_name says to price it from litellm's price map (a
        # server of one's own is otherwise never priced by its model's name: its cost would be unknown)
        proposer = args.proposer or sf.OpenAIBackend("gpt-4o-mini", base_url=server.base_url,
                                                     api_key="sk-local-stand-in", price_by_name=True)
        if args.aggregator and args.api_base:
            aggregator: object = sf.backends.backend_from_spec(args.aggregator, api_base=args.api_base)
        elif args.aggregator:
            aggregator = sf.Model(args.aggregator)
        else:
            aggregator = sf.TransformersBackend(build_tiny_model(scratch))
        models = {
            "proposer": sf.Model(proposer, max_in_flight=8, requests_per_minute=600, params={"max_tokens": 256}),
            "aggregator": sf.Model(aggregator, params={"max_tokens": 48, "temperature": 0.7}),
        }
        result = mixture.run_sync({"problem": args.problem}, models=models, seed=0)

    for trace in result.traces:
        cost = "unknown" if trace.cost is None else f"${trace.cost:.6f}"
        ids = "no token ids" if trace.token_ids is None else f"{len(trace.token_ids)} token ids"
        print(f"{trace.id:<24} {trace.model:<10} attempt {trace.attempt}  {trace.usage.total_tokens:>4} tokens  "
              f"{cost:>10}  {ids}")
    print(f"answer from the proposals: {result.traces[0].answer}")
    print(f"aggregator wrote {len(result.output.text)} characters, reading {len(result.output.inputs)} proposals")


if __name__ == "__main__":
    main()
