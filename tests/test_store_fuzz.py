"""Property: whatever a model, a dataset or a caller produces, the store records it or refuses that one record,
and the next run records and reads back — on SQLite and on a real PostgreSQL server.

Hypothesis draws every kind of record the store writes: a run's inputs and seed, a model's completion (text,
token counts, finish reason, token ids, logprobs, cost, metadata), a reward and a dataset row, from text
with NUL characters and lone surrogates, integers of any size, NaN and infinities, and nested JSON.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scaffold as sf
from scaffold._json import to_json
from scaffold._types import Completion, Usage
from scaffold._values import INT32, INT64, check_seed, check_value, clean_text
from scaffold.testing import ScriptedBackend

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=30)
"""Any code point: NUL, controls, lone surrogates, astral characters."""
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=12)
EXAMPLES = 60


@sf.graph
def solo(problem):
    return sf.generate("Solve {problem}", model="m")


class Answers:
    """A backend answering every request with one drawn completion."""

    capabilities = sf.Capabilities()

    def __init__(self, completion: Completion) -> None:
        self.completion = completion
        self.calls = 0

    async def complete(self, request: Any) -> list[Completion]:
        self.calls += 1
        return [self.completion] * request.n


@st.composite
def completions(draw: Any) -> Completion:
    return Completion(
        text=draw(ANY_TEXT), usage=Usage(draw(st.integers()), draw(st.integers())),
        finish_reason=draw(st.none() | ANY_TEXT), token_ids=draw(st.none() | st.lists(st.integers(), max_size=4)
                                                                 .map(tuple)),
        logprobs=draw(st.none() | st.lists(st.floats() | st.none(), max_size=4).map(tuple)),
        cost=draw(st.none() | st.floats()), metadata=draw(st.dictionaries(ANY_TEXT, JSON, max_size=3)))


def clamp(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


_names = itertools.count()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(problem=ANY_TEXT | JSON, seed=st.none() | st.integers(), completion=completions(),
       reward=st.floats() | st.integers(), reward_meta=st.dictionaries(ANY_TEXT, JSON, max_size=3),
       row=st.dictionaries(ANY_TEXT, JSON, max_size=3))
def test_any_record_is_stored_or_refused_alone_and_the_next_run_reads_back(
        store, problem, seed, completion, reward, reward_meta, row):
    """A run is recorded with its model output sanitised field by field, or refused before it starts when the
    caller's seed or inputs cannot be held; a reward or dataset row is written or refused with RecordError;
    then a plain run records and reads back."""
    postgres = store.url.get_backend_name() == "postgresql"
    run_id = f"case-{next(_names)}"
    inputs = {"problem": problem}
    backend = Answers(completion)
    caller_problem = (check_seed(seed) if seed is not None else None) or check_value(problem, "inputs.problem")
    try:
        result = solo.run_sync(inputs, models={"m": backend}, store=store, run_id=run_id, seed=seed)
    except sf.InputError:
        assert caller_problem is not None and backend.calls == 0
        assert [r.id for r in store.runs(limit=1000) if r.id == run_id] == []
    else:
        assert caller_problem is None, caller_problem
        info = store.run(run_id)
        assert info.status == "ok" and info.inputs == to_json(inputs) and info.seed == result.seed
        (trace,) = store.traces(run_id)
        assert trace.text == clean_text(clean_text(completion.text, no_nul=False), no_nul=postgres)
        bounds = INT32 if postgres else INT64
        assert trace.usage == Usage(clamp(completion.usage.prompt_tokens, bounds),
                                    clamp(completion.usage.completion_tokens, bounds))
        cost = completion.cost
        assert trace.cost == (cost if cost is not None and math.isfinite(cost) else None)
        fits = completion.token_ids is not None and all(INT32[0] <= i <= INT32[1] for i in completion.token_ids)
        assert trace.token_ids == (completion.token_ids if fits else None)
        if completion.logprobs is not None:
            assert trace.logprobs is not None and len(trace.logprobs) == len(completion.logprobs)
    try:
        store.add_reward(reward, run_id=run_id, metadata=reward_meta)
    except sf.RecordError:
        assert not math.isfinite(reward) or check_value(reward_meta, "metadata") is not None
    try:
        store.add_dataset(f"data-{run_id}", [row])
    except sf.RecordError:
        assert check_value(row, "row") is not None
    store.flush()
    plain = f"plain-{run_id}"
    solo.run_sync({"problem": "2+2"}, models={"m": ScriptedBackend(lambda r: "\\boxed{4}")}, store=store,
                  run_id=plain)
    assert store.run(plain).status == "ok" and [t.answer for t in store.traces(plain)] == ["4"]
    assert store.write_error is None


def described(value: Any, where: str, depth: int = 0) -> str | None:
    """An independent statement of what ``check_value`` refuses, naming the place the direct way (every path
    written out as it is walked)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
            return f"{where} holds a lone surrogate (\\u{ord(bad):04x}), which is not valid Unicode text"
        return None
    if isinstance(value, (dict, list, tuple)):
        if depth >= 64:
            return f"{where} is nested more than 64 levels deep"
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(key, str) and described(key, "") is not None:
                return f"a key of {where} holds a lone surrogate, which is not valid Unicode text"
            found = described(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]", depth + 1)
            if found is not None:
                return found
    return None


SURROGATE_JSON = st.recursive(
    st.none() | st.integers() | st.floats() | ANY_TEXT | st.sampled_from(["a\ud800", "\udfff b", "\ud83d\ude00"]),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(ANY_TEXT | st.just("k\udc80"), inner, max_size=3),
    max_leaves=12)
"""JSON data (and tuples) in which lone surrogates, in texts and keys, are frequent."""


@settings(max_examples=500, deadline=None)
@given(value=JSON | SURROGATE_JSON, depth=st.integers(0, 66) | st.integers(52, 66))
def test_check_value_names_the_first_bad_place_as_a_direct_walk_does(value: Any, depth: int) -> None:
    """What ``check_value`` refuses, and the place it names, are what an independent walk of the value says."""
    assert check_value(value, "inputs", depth) == described(value, "inputs", depth)


CLEAN = {"text": st.none() | st.text(st.characters(max_codepoint=126, exclude_characters="\x00"), max_size=8),
         "json": st.none() | st.just("{}") | st.just('{"a": [1, "b"]}'),
         "int": st.none() | st.integers(-2**31 + 1, 2**31 - 1), "float": st.none() | st.floats(-1e9, 1e9)}
"""Values that fit any column of their kind on either database."""
ODD = {"text": ANY_TEXT | st.just("\ud800") | st.just("a\x00b"),
       "json": ANY_TEXT.map(json.dumps) | st.just('"\\ud800"') | st.just('["\\ud83d\\ude00"]'),
       "int": st.integers() | st.sampled_from([-2**31 - 1, -2**31, 2**31, -2**63 - 1, 2**63 - 1, 2**63]),
       "float": st.floats() | st.sampled_from([math.nan, math.inf, -math.inf])}
"""Values that may not fit: any code point, NUL, lone surrogates, texts around a column's length, any integer."""


@settings(max_examples=500, deadline=None)
@given(data=st.data(), table=st.sampled_from(["calls", "runs", "edges", "requests", "rewards", "items"]),
       dialect=st.sampled_from(["sqlite", "postgresql"]))
def test_the_writers_fast_fit_check_agrees_with_the_check_of_each_value(data: Any, table: str, dialect: str) -> None:
    """``Columns.fits`` (all texts checked at once) says what the value-by-value check says, on rows of values
    that fit with a few drawn to test a limit: any code point, NUL, surrogates, lengths, sizes, NaN."""
    from scaffold.store import _schema
    from scaffold.store._storable import Columns

    found = getattr(_schema, table.upper())
    columns = Columns(found, [c.name for c in found.columns], dialect)
    odd = data.draw(st.sets(st.sampled_from(range(len(columns.kinds))), min_size=1, max_size=2))
    row = tuple(data.draw(_odd(kind, limit) if i in odd else CLEAN[kind]) if kind in CLEAN else None
                for i, (kind, limit, _nullable) in enumerate(columns.kinds))
    assert columns.fits(row) == columns.fits_each(row)


def _odd(kind: str, limit: Any) -> Any:
    if kind == "text" and limit is not None:  # a text of the column's length, or one more
        lengths = st.sampled_from([limit, limit + 1]).map(lambda n: "a" * n)
        return st.booleans().flatmap(lambda long: lengths if long else ODD[kind])
    return ODD[kind]


ODD_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    | st.sampled_from([sf.TraceKind.RULE, sf.Status.OK, math.sqrt]),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.frozensets(st.integers(), max_size=3)
    | st.dictionaries(st.text(max_size=4) | st.integers() | st.booleans() | st.none() | st.floats(), inner,
                      max_size=4),
    max_leaves=20,
)
"""Values to_json meets: JSON data, and NaN, tuples, sets, enums, functions and keys that are not text."""


@settings(max_examples=300, deadline=None)
@given(ODD_JSONISH)
def test_to_json_converts_any_value_as_documented(value: Any) -> None:
    """Property: :func:`to_json` (its fast path for the exact JSON types included: rows and inputs) gives the data
    its documented conversion gives, for any value (compared as JSON text)."""

    def reference(v: Any) -> Any:  # to_json's documented conversion, written plainly
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {str(k): reference(x) for k, x in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            return [reference(x) for x in v]
        return repr(v)

    assert json.dumps(to_json(value)) == json.dumps(reference(value))
