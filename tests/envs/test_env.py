"""Prompts, code extraction and feedback of the team environment."""

import pytest
from conftest import weights

from orchestry.envs.base import Roles, Turn
from orchestry.envs.code.extract import agent_code, extract_code
from orchestry.envs.code.problems import FunctionSpec, Problem
from orchestry.envs.code.prompts import diagnostics, feedback_message, initial_messages
from orchestry.envs.code.reward import code_facts, level_reward
from orchestry.envs.code.sandbox import TestReport
from orchestry.params import Params
from orchestry.stages.from_params import make_env

PROBLEM = Problem(
    id="t/double_sum",
    source="coop",
    prompt="Return twice the sum of a and b.",
    helpers=(
        FunctionSpec(
            "aux",
            'def aux(a: int, b: int) -> int:\n    """Sum of a and b."""',
            "def aux(a, b):\n    return a + b\n",
        ),
    ),
    main=FunctionSpec(
        "double_sum",
        'def double_sum(a: int, b: int) -> int:\n    """Twice aux(a, b)."""',
        "def double_sum(a, b):\n    return 2 * aux(a, b)\n",
    ),
    tests=("assert candidate(1, 2) == 6", "assert candidate(0, 0) == 0"),
)
ROLES = Roles.from_agents(["aux", "main"])


def test_main_sees_aux_signature_but_not_its_code():
    helper = initial_messages(PROBLEM, ROLES, "aux")[-1]["content"]
    main = initial_messages(PROBLEM, ROLES, "main")[-1]["content"]
    assert "def aux(a: int, b: int)" in helper and "double_sum" in helper
    assert "def aux(a: int, b: int) -> int:" in main
    assert "return a + b" not in main and "return a + b" not in helper


def test_team_size_must_match_problem():
    with pytest.raises(ValueError, match="t/double_sum has 1 helper"):
        initial_messages(PROBLEM, Roles.from_agents(["a1", "a2", "main"]), "main")


# Completions in the shapes SmolLM2-135M-Instruct actually produces.
REAL_FENCED = """Here is the helper function:

```python
def aux(a: int, b: int) -> int:
    \"\"\"Sum of a and b.\"\"\"
    return a + b
```

This function adds two numbers. For example:
```python
print(aux(1, 2))
```
"""
REAL_TRUNCATED = """```python
def double_sum(a: int, b: int) -> int:
    result = aux(a, b)
    return result * 2

def helper_unused(x):
    for i in range(x):
        if i >"""
REAL_NO_FENCE = """To solve this problem we can write:
def double_sum(a, b):
    return 2 * aux(a, b)
double_sum(1, 2)
This returns 6."""


def test_extract_from_fenced_blocks_drops_example_calls():
    code = extract_code(REAL_FENCED)
    assert code.startswith("def aux(a: int, b: int) -> int:")
    assert "print" not in code


def test_extract_cuts_truncated_tail():
    code = extract_code(REAL_TRUNCATED)
    assert "def double_sum" in code and "return result * 2" in code
    assert "helper_unused" not in code or "if i >" not in code
    compile(code, "<x>", "exec")


def test_extract_without_fence():
    code = extract_code(REAL_NO_FENCE)
    assert code.strip().startswith("def double_sum(a, b):")
    assert "double_sum(1, 2)\n" not in code + "\n" or code.count("double_sum(1, 2)") == 0


def test_extract_nothing_usable():
    assert extract_code("I cannot help with that.") == ""
    assert extract_code("```python\n```") == ""


def test_main_may_not_redefine_aux_and_helper_may_not_define_main():
    text = "```python\ndef aux(a, b):\n    return 0\n\ndef double_sum(a, b):\n    return 2 * aux(a, b)\n```"
    main_code = agent_code(text, PROBLEM, ROLES, "main", rename_lone_helper=False)
    assert "def aux" not in main_code and "def double_sum" in main_code
    helper_code = agent_code(text, PROBLEM, ROLES, "aux", rename_lone_helper=False)
    assert "def aux" in helper_code and "double_sum" not in helper_code


def test_feedback_carries_diagnostics_and_history():
    report = TestReport(
        passed=(True, False),
        first_failure="test 2: AssertionError: candidate(0, 0) == 1",
        syntax_error=None,
        load_error=None,
        timed_out=False,
        output="",
    )
    main = "def double_sum(a, b):\n    return a + b\n"
    reward = level_reward(
        code_facts([PROBLEM.helpers[0].reference], ["aux"], main, "double_sum"),
        report,
        weights(),
    )
    diag = diagnostics(PROBLEM, reward, report, main)
    assert (
        "Tests passed: 1/2" in diag
        and "First failure: test 2" in diag
        and "does not call `aux`" in diag
    )
    msg = feedback_message("level_feedback", diag)
    assert diag in msg
    assert diag not in feedback_message("plain", diag)
    assert "expert" in feedback_message("expert_edits", diag, "use aux")
    history = make_env(Params()).observe(PROBLEM, "main", [Turn("old answer", msg)])
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    assert history[:2] == initial_messages(PROBLEM, ROLES, "main") and history[-1]["content"] == msg
    with pytest.raises(ValueError, match="unknown feedback mode"):
        feedback_message("loud", diag)


def test_a_lone_helper_under_another_name_is_renamed_only_when_asked():
    text = "```python\ndef first_letter(w):\n    return w[:1] if len(w) < 2 else first_letter(w[:1])\n```"
    plain = agent_code(text, PROBLEM, ROLES, "aux", rename_lone_helper=False)
    assert "def first_letter" in plain
    renamed = agent_code(text, PROBLEM, ROLES, "aux", rename_lone_helper=True)
    assert "def aux(w)" in renamed and "aux(w[:1])" in renamed and "first_letter" not in renamed
    two = "```python\ndef f(x):\n    return x\n\ndef g(x):\n    return x\n```"
    assert agent_code(two, PROBLEM, ROLES, "aux", rename_lone_helper=True) == agent_code(
        two, PROBLEM, ROLES, "aux", rename_lone_helper=False
    )
    main = "```python\ndef other(a, b):\n    return a\n```"
    assert "def other" in agent_code(main, PROBLEM, ROLES, "main", rename_lone_helper=True)
