"""Test doubles that ship with the package, so users test their own graphs the same way we do.

- :class:`ScriptedBackend`: answers from a function or a table; records every request;
  can fail, be slow, and measures how many requests were in flight at once.
- :class:`SimulatedBackend`: seeded latency (lognormal by default) for benchmarks and examples.
- :class:`VirtualClock`: virtual time for a :class:`~scaffold.Model`'s pacing, retry backoff and timeouts
  (``Model(..., clock=VirtualClock())``), so a test asserts when each request went out without waiting.
- :class:`OpenAIServer`: a real OpenAI-compatible HTTP server on 127.0.0.1 answering from a
  scripted policy, streamed (server-sent events) or not, with fault injection (:class:`Fault`:
  429 + Retry-After, 5xx, slow, malformed, truncated bodies and streams, dropped connections)
  and a log of every request; :func:`random_faults` fails a share of requests at random
  (:data:`SPORADIC_FAULTS`), and ``server.allowed_rate`` may change while it serves.
- :class:`PostgresServer`: a throwaway PostgreSQL cluster on 127.0.0.1 (local server binaries),
  deleted when stopped.
- :func:`build_tiny_model`: a tiny random Hugging Face chat model built locally (no download).
- :func:`sample_store`: a store holding RSA runs and a vote evaluated on the same problems (scripted
  answers), to try ``scaffold ui`` on; :func:`headless_chromium` and :func:`open_page` to test it in a
  real browser (Debian's Chromium through Selenium).
- :func:`request_bodies` and :func:`viewer_queries`: hypothesis strategies that fuzz a served graph and the
  viewer over HTTP (malformed, hostile and deeply nested bodies; any query text).
"""

from scaffold.testing._browser import headless_chromium, open_page
from scaffold.testing._clock import VirtualClock
from scaffold.testing._faults import SPORADIC_FAULTS, Fault, random_faults
from scaffold.testing._fuzz import request_bodies, viewer_queries
from scaffold.testing._postgres import PostgresServer
from scaffold.testing._sample_store import SampleStore, sample_store
from scaffold.testing._scripted import ScriptedBackend
from scaffold.testing._server import OpenAIServer, ServedRequest, ServerRequest
from scaffold.testing._simulated import SimulatedBackend
from scaffold.testing._tiny_model import build_tiny_model

__all__ = [
    "ScriptedBackend",
    "SimulatedBackend",
    "VirtualClock",
    "OpenAIServer",
    "Fault",
    "random_faults",
    "SPORADIC_FAULTS",
    "ServerRequest",
    "ServedRequest",
    "PostgresServer",
    "build_tiny_model",
    "sample_store",
    "SampleStore",
    "headless_chromium",
    "open_page",
    "request_bodies",
    "viewer_queries",
]
