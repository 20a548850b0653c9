"""The team's own tools on the server (issue 58): each call runs in the box (a root of its own: no
host file but the Python install and a scratch space), outside the batching worker, so other
clients are answered while a tool runs; a box past its time is killed; without a tool runner a
team whose env turns tools on is not served."""

from __future__ import annotations

import threading

import pytest
from conftest import ROOT, sampling

from orchestry.agents.base import Generation
from orchestry.envs.tools.registry import run_python
from orchestry.params import parse_params
from orchestry.serve.batcher import Batcher, BatchSettings
from orchestry.serve.metrics import ServeMetrics
from orchestry.serve.models import Served
from orchestry.serve.tool_box import BoxCall, check_box, run_in_box
from orchestry.stages.from_params import make_env, sandbox_limits

TASK = 'def add_three(x):\n    """Return x plus 3."""\n'
SNOOP = (
    "import os\n"
    "for path in ['/etc/passwd', {params!r}, {home!r}]:\n"
    "    try:\n"
    "        print(path, os.listdir(path) if os.path.isdir(path) else open(path).read())\n"
    "    except OSError as err:\n"
    "        print(path, type(err).__name__)\n"
).format(params=str(ROOT / "params.yaml"), home=str(ROOT.parent))
LIMITS = {
    "timeout_s": 10.0,
    "cpu_s": 5,
    "memory_mb": 256,
    "max_processes": 8,
    "max_file_mb": 1,
    "max_output_kb": 8,
}


def box_call(code: str, tool: str = "python") -> BoxCall:
    return BoxCall(("python", "calculator"), 2, 4000, LIMITS, TASK, 1, "", tool, code)


def test_a_tool_call_in_the_box_reads_no_host_file():
    """The project's sandbox alone can read /etc/passwd and other checkouts (the box's reason)."""
    result = run_in_box(box_call(SNOOP))
    assert "/etc/passwd FileNotFoundError" in result, result
    assert f"{ROOT / 'params.yaml'} FileNotFoundError" in result, result
    assert "root:" not in result and "sampling:" not in result, result
    siblings = result.splitlines()[-1]  # the checkouts' parent: nothing of the host in it
    # a checkout under /tmp: the sandbox's own /tmp covers it, and the folder reads empty
    seen = (
        f"{ROOT.parent} FileNotFoundError",
        f"{ROOT.parent} ['{ROOT.name}']",
        f"{ROOT.parent} []",
    )
    assert siblings in seen, siblings
    assert run_in_box(box_call("2 ** 10", "calculator")) == "1024"


def test_the_plain_sandbox_is_what_the_box_closes():
    """The old server ran the python tool in the sandbox alone: /etc/passwd was readable."""
    assert "root:" in run_python(SNOOP, sandbox_limits(parse_params({})))


def test_the_box_probe_passes_here_and_a_box_past_its_time_is_killed():
    check_box()
    result = run_in_box(box_call("import time\ntime.sleep(30)"), timeout_s=1.0)
    assert result == "error: the tool ran past 1 s and was stopped"


class Scripted:
    """Each agent answers from its script, one text per request; keeps every request."""

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = {a: list(t) for a, t in scripts.items()}
        self.requests: list = []

    def generate(self, requests, spec):
        out = []
        for r in requests:
            self.requests.append(r)
            text = self.scripts[r.agent].pop(0)
            out.append(Generation(r.agent, [text], [[1, 2]], [1, 2, 3], 0.0, 2))
        return out


def tools_env():
    return make_env(parse_params({"env": {"tools": {"enabled": True}}}), training=False)


def test_a_team_tool_call_runs_in_the_box_outside_the_worker():
    """Issue 58: the tool once ran inside the batching worker (every client waited) and outside
    any box; now an agent request is answered while the team's tool call is still running."""
    aux_first = f'<tool name="python">{SNOOP}</tool>'
    gen = Scripted(
        {
            "aux": [aux_first, "def aux(x):\n    return 3\n"],
            "main": ["def add_three(x):\n    return x + aux(x)\n", "agent answer"],
        }
    )
    running, release = threading.Event(), threading.Event()

    def run_tool(call: BoxCall) -> str:
        running.set()
        assert release.wait(60)
        return run_in_box(call)

    served = Served(gen, ["aux", "main"], tools_env(), "team", run_tool=run_tool)
    batcher = Batcher(served, BatchSettings(8, 8, 0.0), ServeMetrics())
    spec = sampling(max_new_tokens=8)
    batcher.start()
    try:
        team = served.job("team", [{"role": "user", "content": TASK}], spec, None)
        batcher.submit(team)
        assert running.wait(30), "the team's tool call never ran"
        agent = served.job("main", [{"role": "user", "content": "hi"}], spec, None)
        batcher.submit(agent)
        assert agent.future.result(30).text == "agent answer"  # while the tool still runs
        assert not team.future.done()
        release.set()
        reply = team.future.result(60)
    finally:
        release.set()
        batcher.close()
    shown = gen.requests[-1].messages[-1]["content"]
    assert gen.requests[-1].agent == "aux" and shown.startswith('<result name="python">')
    assert "/etc/passwd FileNotFoundError" in shown and "root:" not in shown, shown
    assert reply.actions is not None and "return 3" in reply.actions["aux"]
    assert reply.text.startswith("def aux(x):") and "def add_three" in reply.text
    assert reply.completion_tokens == 3 * 2  # three segments of two tokens


def test_a_team_with_tools_is_not_served_without_a_tool_runner():
    with pytest.raises(ValueError, match="--server-tools"):
        Served(Scripted({}), ["aux", "main"], tools_env(), "team")
