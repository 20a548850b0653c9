"""The tools by name: each a plain `str -> str` callable with a description.

- `python` runs the argument as a program, after the agent's draft code so far (its definitions,
  as the environment reads them), in the project's sandbox (`envs/code/sandbox`, the limits of
  params `sandbox`) and returns its stdout and stderr, the exception it raised, or the timeout;
- `calculator` evaluates plain arithmetic (`calculator.py`, no code runs);
- `examples` runs the task's public examples (the `Example: f(x) == y` lines and `>>>` doctests of
  the prompt and the signatures' docstrings; never the hidden tests) against the agent's current
  draft in the sandbox, and reports pass or fail per example.

`ToolUse` is what an environment declares to turn tools on (CodeEnv's `tool_use`): the names, the
turn's budget, the sandbox limits; `tools(task, draft)` binds them to one task and draft.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, TestReport, run_tests_in_sandbox
from orchestry.envs.tools import protocol
from orchestry.envs.tools.calculator import CalculatorError, calculate

DESCRIPTIONS: dict[str, str] = {
    "python": "runs the Python code you give after your functions so far and shows what it "
    "prints or the error it raised",
    "calculator": "computes an arithmetic expression such as (3 + 4) * 2 ** 5",
    "examples": "runs the task's examples against the code you wrote so far; say nothing inside",
}
TOOL_NAMES = tuple(DESCRIPTIONS)  # envs/catalog.py lists them for params validation

_EXAMPLE = re.compile(r"Example:\s*(.+?)\s*==\s*(.+?)\s*$", re.MULTILINE)
_DOCTEST = re.compile(r"^\s*>>>\s*(.+?)\s*\n\s*(?!>>>)(\S.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Tool:
    """One tool: its name, what the agent is told it does, and the call."""

    name: str
    description: str
    run: Callable[[str], str]

    def __call__(self, argument: str) -> str:
        return self.run(argument)


def run_python(code: str, limits: SandboxLimits) -> str:
    """The program's output in the sandbox, with its exception or timeout."""
    report = run_tests_in_sandbox(SandboxJob(code, ()), limits)
    return _program_result(report) or "(no output)"


def run_calculator(expression: str) -> str:
    try:
        return repr(calculate(expression))
    except CalculatorError as exc:
        return f"error: {exc}"


def public_examples(task: Problem) -> list[tuple[str, str]]:
    """(call, expected) of every public example the task shows, in order, without repeats."""
    texts = [task.prompt, task.main.signature, *(h.signature for h in task.helpers)]
    found: list[tuple[str, str]] = []
    for text in texts:
        for pattern in (_EXAMPLE, _DOCTEST):
            for call, expected in pattern.findall(text):
                pair = (call.strip(), expected.strip().rstrip(".").strip())
                if pair not in found and _parses(pair[0]) and _parses(pair[1]):
                    found.append(pair)
    return found


def run_examples(task: Problem, draft: str, limits: SandboxLimits) -> str:
    """Pass or fail of each public example on the draft, run in the sandbox."""
    examples = public_examples(task)
    if not examples:
        return "this task shows no examples to run"
    if not draft.strip():
        return "no code written yet: write your function first, then call examples"
    tests = tuple(f"assert ({call}) == ({expected})" for call, expected in examples)
    report = run_tests_in_sandbox(SandboxJob(draft, tests), limits)
    lines = [
        f"example {i}: {call} == {expected}: {'pass' if ok else 'FAIL'}"
        for i, ((call, expected), ok) in enumerate(zip(examples, report.passed, strict=True), 1)
    ]
    if report.first_failure:
        lines.append(report.first_failure)
    problem = _program_result(report, output=False)
    return "\n".join([*lines, problem] if problem else lines)


@dataclass(frozen=True)
class ToolUse:
    """Tools turned on in an environment: which, the turn's budget, the sandbox they run in."""

    names: tuple[str, ...]
    budget: protocol.ToolBudget
    limits: SandboxLimits

    def __post_init__(self) -> None:
        unknown = [n for n in self.names if n not in DESCRIPTIONS]
        if unknown or not self.names:
            raise ValueError(
                f"env.tools.names: unknown or no tools {unknown or list(self.names)}; "
                f"known: {', '.join(TOOL_NAMES)}"
            )

    def instructions(self) -> str:
        """What the agent's prompt says about the tools."""
        return protocol.instructions(
            {n: DESCRIPTIONS[n] for n in self.names}, self.budget.max_calls
        )

    def tools(self, task: Problem, draft: str) -> dict[str, Tool]:
        """The tools bound to one task and the agent's draft code so far."""
        runs: dict[str, Callable[[str], str]] = {
            "python": lambda code: run_python(f"{draft}\n\n{code}" if draft else code, self.limits),
            "calculator": run_calculator,
            "examples": lambda _: run_examples(task, draft, self.limits),
        }
        return {n: Tool(n, DESCRIPTIONS[n], runs[n]) for n in self.names}

    def call(self, task: Problem, draft: str, call: protocol.ToolCall) -> str:
        """The result of one call (an unknown name answers with the tools there are)."""
        tools = self.tools(task, draft)
        if call.name not in tools:
            return f"error: no tool {call.name!r}; tools: {', '.join(tools)}"
        return tools[call.name](call.argument)


def _program_result(report: TestReport, output: bool = True) -> str:
    parts = [report.output.rstrip("\n")] if output and report.output.strip() else []
    if report.syntax_error:
        parts.append(f"SyntaxError: {report.syntax_error}")
    if report.load_error:
        parts.append(f"Exception: {report.load_error}")
    if report.timed_out:
        parts.append("timed out")
    return "\n".join(parts)


def _parses(source: str) -> bool:
    try:
        compile(source, "<example>", "eval")
    except SyntaxError:
        return False
    return True
