"""The team protocol with tools on (orchestry/eval/protocols.py): its rows carry each agent's calls
and count every segment's tokens; without tools the rows are as they were. The real code env and
sandbox; the generator answers from a script (the test decides what the "model" writes)."""

from conftest import ROOT, sampling

from orchestry.agents.base import Generation
from orchestry.envs.code.problems import load_problem_dir
from orchestry.eval.protocols import team
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env

TASK = load_problem_dir(ROOT / "data/coop")[0]
PROGRAM = f"```python\n{TASK.helpers[0].reference}\n{TASK.main.reference}```\n"


class Scripted:
    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = {a: list(t) for a, t in scripts.items()}

    def generate(self, requests, spec):
        out = []
        for r in requests:
            texts = [self.scripts[r.agent].pop(0) for _ in range(r.n)]
            out.append(Generation(r.agent, texts, [[7] * 3] * r.n, [1], 0.0, 3 * r.n))
        return out


def test_team_rows_record_the_calls_and_every_segments_tokens():
    env = make_env(parse_params({"env": {"tools": {"enabled": True}}}), training=False)
    call = '<tool name="calculator">6 * 7</tool>'
    gen = Scripted({"aux": [PROGRAM + call, "ok"], "main": [PROGRAM]})
    [row] = team(gen, env, [TASK], 1, sampling(max_new_tokens=8), "team")
    assert row["tools"] == {
        "aux": [
            {"name": "calculator", "argument": "6 * 7", "result": row["tools"]["aux"][0]["result"]}
        ],
        "main": [],
    }
    assert "42" in row["tools"]["aux"][0]["result"]
    assert row["new_tokens"] == 9 and row["correct"] is True  # aux's two segments and main's one


def test_without_tools_the_rows_have_no_tools_key():
    env = make_env(parse_params({}), training=False)
    [row] = team(
        Scripted({"aux": [PROGRAM], "main": [PROGRAM]}), env, [TASK], 1, sampling(), "team"
    )
    assert "tools" not in row
