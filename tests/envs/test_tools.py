"""The tools (orchestry/envs/tools): the call protocol's parser, each tool (the sandbox really
runs, a hostile program stays contained), the registry's errors."""

import pytest
from conftest import ROOT, limits

from orchestry.envs.code.problems import FunctionSpec, Problem, load_problem_dir
from orchestry.envs.tools.calculator import CalculatorError, calculate
from orchestry.envs.tools.protocol import (
    ToolBudget,
    final_answer,
    parse_call,
    result_message,
)
from orchestry.envs.tools.registry import (
    TOOL_NAMES,
    ToolUse,
    public_examples,
    run_calculator,
    run_examples,
    run_python,
)

LIMITS = limits(timeout_s=10.0, cpu_s=3)


# ------------------------------------------------------------------ the protocol
@pytest.mark.parametrize(
    "text",
    [
        'ok <tool name="python">print(2)</tool>',
        "ok <tool name='python'>print(2)</tool>",
        "ok <tool name=python>print(2)</tool>",
        'ok <TOOL Name = "Python" >print(2)</Tool>',
        'ok <tool name="python">\n```python\nprint(2)\n```\n</tool> trailing',
    ],
)
def test_a_sloppy_call_still_parses(text):
    call = parse_call(text)
    assert call is not None and call.name == "python" and call.argument == "print(2)"
    assert text[: call.end].lower().endswith("</tool>")


@pytest.mark.parametrize(
    "text", ["no call here", '<tool name="python">print(2)', "<tool>print(2)</tool>"]
)
def test_no_complete_named_call_is_none(text):
    assert parse_call(text) is None


def test_only_the_first_call_is_read():
    call = parse_call('<tool name="calculator">1+1</tool><tool name="python">x</tool>')
    assert call is not None and (call.name, call.argument) == ("calculator", "1+1")


def test_the_final_answer_is_the_text_outside_the_calls():
    segments = [
        "def f(x):\n    return x\n" + '<tool name="examples"></tool>',
        "All pass.\n" + '<tool name="python">print(1)',  # an unclosed call cut by the budget
    ]
    assert final_answer(segments) == "def f(x):\n    return x\nAll pass."


def test_a_long_result_is_cut_to_the_budget():
    shown = result_message("python", "x" * 50, max_chars=10)
    assert shown.startswith('<result name="python">\nxxxxxxxxxx\n... [40 more characters cut]')
    assert shown.endswith("</result>")


def test_a_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="max_calls"):
        ToolBudget(0, 10)


# ------------------------------------------------------------------ the tools
def test_calculator_does_arithmetic_only():
    assert calculate("(3 + 4) * 2 ** 5") == 224
    assert calculate("7 // 2 + 7 % 2 - -1") == 5
    assert run_calculator("1 / 0") == "error: division by zero"
    for hostile in ("__import__('os').system('id')", "x + 1", "[1, 2]", "9 ** 9 ** 9"):
        with pytest.raises(CalculatorError):
            calculate(hostile)
    assert run_calculator("(10 ** 1000) ** 1000").startswith("error:")


def test_python_runs_in_the_sandbox_and_reports_output_and_exceptions():
    assert run_python("print(sorted([3, 1, 2]))", LIMITS) == "[1, 2, 3]"
    shown = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\n1 / 0", LIMITS)
    assert "out" in shown and "err" in shown and "ZeroDivisionError" in shown
    assert run_python("def f(:\n", LIMITS).startswith("SyntaxError")
    assert run_python("x = 1", LIMITS) == "(no output)"


def test_a_hostile_program_stays_contained(tmp_path):
    marker = tmp_path / "escaped"
    hostile = (
        "import os, socket\n"
        f"try:\n    open({str(marker)!r}, 'w').write('x')\nexcept OSError as e:\n    print('write', type(e).__name__)\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
        "except OSError as e:\n    print('net', type(e).__name__)\n"
        "print('repo', os.listdir(os.path.dirname(" + repr(str(ROOT / "orchestry")) + ")))\n"
    )
    shown = run_python(hostile, LIMITS)
    assert not marker.exists()
    assert "write" in shown and "net" in shown
    assert "orchestry" not in shown.split("repo", 1)[-1]  # the repository is hidden
    assert run_python("while True:\n    pass", LIMITS) == "timed out"


def _problem_with_examples() -> Problem:
    aux = FunctionSpec(
        "aux", 'def aux(x: int) -> int:\n    """Return x."""', "def aux(x):\n    return x\n"
    )
    main = FunctionSpec(
        "twice",
        'def twice(x: int) -> int:\n    """Return 2 * aux(x).\n\n    Example: twice(3) == 6\n    '
        '>>> twice(0)\n    0\n    """',
        "def twice(x):\n    return 2 * x\n",
    )
    return Problem(
        "coop/twice",
        "coop",
        "Double a number.",
        (aux,),
        main,
        ("assert candidate(5) == 10",),
        "",
        "easy",
    )


def test_examples_are_the_public_ones_never_the_hidden_tests():
    assert public_examples(_problem_with_examples()) == [("twice(3)", "6"), ("twice(0)", "0")]


def test_examples_run_against_the_draft_and_report_each():
    task = _problem_with_examples()
    right = run_examples(task, "def twice(x):\n    return 2 * x\n", LIMITS)
    assert right.splitlines() == [
        "example 1: twice(3) == 6: pass",
        "example 2: twice(0) == 0: pass",
    ]
    wrong = run_examples(task, "def twice(x):\n    return x + 3\n", LIMITS)
    assert "example 1: twice(3) == 6: pass" in wrong and "example 2: twice(0) == 0: FAIL" in wrong
    assert run_examples(task, "", LIMITS).startswith("no code written yet")


def test_a_task_without_examples_says_so():
    task = load_problem_dir(ROOT / "data/coop")[0]
    assert run_examples(task, "def f():\n    pass\n", LIMITS) == (
        "this task shows no examples to run"
    )


def test_tool_use_names_the_bad_key_and_answers_unknown_tools():
    with pytest.raises(ValueError, match="env.tools.names"):
        ToolUse(("python", "search"), ToolBudget(2, 100), LIMITS)
    use = ToolUse(TOOL_NAMES, ToolBudget(2, 100), LIMITS)
    assert set(use.tools(_problem_with_examples(), "")) == set(TOOL_NAMES)
    call = parse_call('<tool name="search">x</tool>')
    assert call is not None
    assert use.call(_problem_with_examples(), "", call).startswith("error: no tool 'search'")
    assert "calculator" in use.instructions() and "up to 2 times" in use.instructions()


def test_python_runs_after_the_draft():
    use = ToolUse(("python",), ToolBudget(1, 100), LIMITS)
    call = parse_call('<tool name="python">print(twice(4))</tool>')
    assert call is not None
    assert use.call(_problem_with_examples(), "def twice(x):\n    return 2 * x\n", call) == "8"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"name": "story", "tools": {"enabled": True}}, "env.tools.enabled needs env.name code"),
        (
            {"tools": {"names": ["python", "search"]}},
            r"env.tools.names: .*unknown tools \['search'\]",
        ),
        ({"tools": {"max_calls": 0}}, "env.tools.max_calls"),
        ({"tools": {"enable": True}}, "unknown key 'env.tools.enable'"),
    ],
)
def test_bad_tool_params_name_the_key(env, message):
    from orchestry.params import parse_params

    with pytest.raises(ValueError, match=message):
        parse_params({"env": env})


def test_tools_are_off_by_default():
    from orchestry.params import parse_params
    from orchestry.stages.from_params import make_env

    env = make_env(parse_params({}))
    assert env.tool_use is None
    assert "<tool" not in env.observe(load_problem_dir(ROOT / "data/coop")[0], "aux")[-1]["content"]
