"""The built-in tools: the calculator (against Python's own arithmetic, and what it refuses) and the Python executor
(what it isolates: environment, directory, CPU, memory, time, network where the OS allows it), and tools by name."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scaffold as sf
from scaffold.tools import CalculatorError, calculator, evaluate, named_tools, network_isolated, python_executor

# -- the calculator ---------------------------------------------------------------------------------------
integers = st.integers(min_value=-10**6, max_value=10**6)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return str(draw(integers))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({draw(expressions(depth - 1))} {op} {draw(expressions(depth - 1))})"


@given(expressions())
def test_the_calculator_agrees_with_python_on_integer_arithmetic(expression: str) -> None:
    assert evaluate(expression) == eval(expression)  # noqa: S307 - the reference, on expressions made here


@pytest.mark.parametrize(("expression", "value"), [
    ("2 ** 10", 1024), ("7 // 2", 3), ("7 % 4", 3), ("-3 + +2", -1), ("sqrt(2) ** 2", pytest.approx(2.0)),
    ("factorial(10)", 3628800), ("gcd(12, 18)", 6), ("max(1, 5, 3)", 5), ("round(pi, 3)", 3.142),
    ("comb(10, 3)", 120),
])
def test_the_calculator_evaluates_functions_and_constants(expression: str, value: object) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(("expression", "message"), [
    ("__import__('os').system('true')", "Call is not arithmetic"),
    ("__import__('os')", "unknown function '__import__'"),
    ("x + 1", "unknown name 'x'"),
    ("(1).real", "Attribute is not arithmetic"),
    ("[i for i in range(3)]", "ListComp is not arithmetic"),
    ("9 ** 9 ** 9", "more than 1000 digits"),
    ("factorial(100000)", "factorial() of a number above 5000 is too large"),
    ("1 +", "not an arithmetic expression"),
    ("'a' * 3", "Constant is not arithmetic"),
])
def test_the_calculator_refuses_what_is_not_arithmetic_and_what_is_too_large(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expression)


def test_the_calculator_tool_answers_and_its_errors_go_back_to_the_model() -> None:
    async def main() -> tuple[sf.ToolOutcome, sf.ToolOutcome, sf.ToolOutcome]:
        return (await calculator.call({"expression": "(2 + 3) * 7"}), await calculator.call({"expression": "1 / 0"}),
                await calculator.call({"expression": "open('/etc/passwd')"}))

    good, zero, hostile = asyncio.run(main())
    assert good.ok and good.text == "35"
    assert isinstance(zero.error, sf.ToolFailed) and "ZeroDivisionError: division by zero" in zero.text
    assert isinstance(hostile.error, sf.ToolFailed) and "unknown function 'open'" in hostile.text


# -- the Python executor ------------------------------------------------------------------------------------
def run_code(code: str, **options: object) -> sf.ToolOutcome:
    executor = python_executor(**options)
    return asyncio.run(executor.call({"code": code}))


def test_the_executor_runs_code_in_a_private_directory_with_a_scrubbed_environment(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak-0123456789")
    outcome = run_code("import os, json; print(json.dumps({'cwd': os.getcwd(), 'env': sorted(os.environ), "
                       "'files': os.listdir('.')}))")
    seen = json.loads(outcome.text)
    assert seen["env"] == ["HOME", "LANG", "PATH", "TMPDIR"]
    assert os.path.basename(seen["cwd"]).startswith("scaffold-python-") and seen["files"] == ["main.py"]
    assert not os.path.exists(seen["cwd"])  # removed after the call
    assert "sk-must-not-leak" not in outcome.text


@pytest.mark.parametrize(("code", "options", "said"), [
    ("while True: pass", {"cpu_seconds": 1, "timeout": 30}, "[killed: CPU limit of 1s]"),
    ("import time; time.sleep(60)", {"timeout": 1}, "[killed: wall-clock timeout of 1s]"),
    ("x = bytearray(400 * 1024 * 1024)", {"memory_mb": 200}, "MemoryError"),
    ("open('big', 'wb').write(b'x' * 3 * 2 ** 20)", {"max_file_mb": 1}, "OSError: [Errno 27] File too large"),
    ("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)", {},
     "out\n[stderr]\nerr\n\n[exit status 3]"),
])
def test_the_executors_limits_stop_the_code_and_say_why(code: str, options: dict, said: str) -> None:
    outcome = run_code(code, **options)
    assert outcome.ok  # the limit is the program's outcome, shown to the model
    assert said in outcome.text


@pytest.mark.skipif(not network_isolated(), reason="platform: this machine gives no unprivileged network namespace")
def test_the_executor_has_no_network_where_the_os_allows_it() -> None:
    outcome = run_code("import socket\ntry:\n    socket.create_connection(('10.255.255.1', 80), timeout=5)\n"
                       "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__, exc.errno)")
    assert outcome.metadata == {"network_isolated": True}
    assert outcome.text.startswith("OSError 101")  # ENETUNREACH: no interface but a loopback that is down


def test_named_tools_resolve_builtins_modules_and_refuse_unknown_names() -> None:
    tools = named_tools(["calculator", "python", "scaffold.tools:calculator"])
    assert [t.name for t in tools] == ["calculator", "python", "calculator"]
    with pytest.raises(sf.GraphDefinitionError, match="unknown tool 'abacus'"):
        named_tools(["abacus"])
    with pytest.raises(sf.GraphDefinitionError, match="cannot be imported"):
        named_tools(["no_such_module:thing"])
