"""Tools within a joint turn (orchestry/joint/tool_turn.py): a completion ending in a call gets the
result and is continued, within the budget; the action is the text outside the calls; every
segment keeps its own prompt and tokens for the update.

The environment is the real code environment with tools on (its sandbox really runs); the
generator answers from a script, one text per request in the order asked, so the test decides
what the "model" writes.
"""

from conftest import ROOT

from orchestry.agents.base import Generation, SamplingSpec
from orchestry.algos.magrpo import AdvantageSettings, sample_advantages
from orchestry.algos.tree import RolloutSettings, rollout
from orchestry.envs.code.problems import load_problem_dir
from orchestry.joint.turn import Ask, aligned, answer_turn
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env

SAMPLING = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)
TASK = load_problem_dir(ROOT / "data/coop")[0]
AUX = TASK.helpers[0].reference


class Scripted:
    """Answers each request with the next text of its agent's script; keeps every request."""

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = {a: list(t) for a, t in scripts.items()}
        self.requests: list = []
        self.samplings: list[SamplingSpec] = []

    def generate(self, requests, sampling):
        self.samplings.append(sampling)
        out = []
        for r in requests:
            self.requests.append(r)
            texts = [self.scripts[r.agent].pop(0) for _ in range(r.n)]
            ids = [[len(self.requests), k] for k in range(r.n)]
            prompt = [len(r.messages)]
            out.append(Generation(r.agent, texts, ids, prompt, 0.0, 2 * r.n))
        return out


def env(max_calls: int = 2):
    tools = {"enabled": True, "max_calls": max_calls}
    return make_env(parse_params({"env": {"tools": tools}}))


def test_a_call_is_run_and_the_answer_continues_after_its_result():
    aux_first = f"```python\n{AUX}```\n" + '<tool name="python">print(aux("graphics"))</tool>'
    gen = Scripted({"aux": [aux_first, "Checked."], "main": ["no tools for me"]})
    turn = answer_turn(gen, env(), [Ask(TASK, {"aux": (), "main": ()}, aligned(1, 2))], SAMPLING)
    aux = turn.answers[0]["aux"][0]
    assert gen.samplings[0].stop == ("</tool>",)  # every segment stops at a call's end
    assert [s.name for s in aux.steps] == ["python"]
    assert aux.steps[0].result == '<result name="python">\nG\n</result>'
    # the continuation's prompt: the observation, the agent's segment, the result
    continued = gen.requests[-1]
    assert continued.messages[-2] == {"role": "assistant", "content": aux_first}
    assert continued.messages[-1] == {"role": "user", "content": aux.steps[0].result}
    assert aux.text == f"```python\n{AUX}```\nChecked."  # outside the calls
    assert "def aux" in aux.action and turn.answers[0]["main"][0].steps == ()  # tools on, no call
    assert aux.tool_record() == [
        {"name": "python", "argument": 'print(aux("graphics"))', "result": aux.steps[0].result}
    ]
    assert len(turn.calls) == 2  # the first generate call and one round of continuations


def test_the_budget_stops_calls_and_the_last_unrun_call_is_dropped():
    call = '<tool name="calculator">1 + 1</tool>'
    gen = Scripted({"aux": [call, call, "x" + call], "main": ["m"]})
    turn = answer_turn(
        gen, env(max_calls=2), [Ask(TASK, {"aux": (), "main": ()}, aligned(1, 2))], SAMPLING
    )
    aux = turn.answers[0]["aux"][0]
    assert [s.result for s in aux.steps] == ['<result name="calculator">\n2\n</result>'] * 2
    assert aux.text == "x"  # the third call was past the budget: not run, not in the answer
    assert len(gen.requests) == 4


def test_every_segment_is_an_update_row_with_the_samples_advantage():
    """The tree stores each later segment beside the sample; the advantages give every segment a
    row with its sample's advantage, and no row holds a result's text (the prompts do)."""
    program = f"```python\n{AUX}\n{TASK.main.reference}```\n"
    call = '<tool name="calculator">2 * 3</tool>'
    gen = Scripted({"aux": [program + call, "nothing", "done"], "main": [program, "nothing"]})
    settings = RolloutSettings(2, 1, 1.0, "aligned", 0.0, 0.0, False, 0.0)
    ro = rollout(gen, env(), [TASK], SAMPLING, settings)
    first, second = ro.groups[0].samples
    assert ro.groups[0].agent == "aux" and len(first.continuations) == 1
    assert first.continuations[0] == ([4], [3, 0])  # the continuation's own prompt and tokens
    assert second.continuations == () and first.tools[0]["name"] == "calculator"
    assert ro.nodes[0].tool_record() == {"tools": {"aux": list(first.tools), "main": []}}
    assert ro.nodes[1].tool_record() == {"tools": {"aux": [], "main": []}}  # tools on, no call
    rows = sample_advantages(ro.groups, AdvantageSettings("mean", False, 0.0))["aux"]
    assert [r[:2] for r in rows] == [
        (first.prompt_ids, first.token_ids),
        first.continuations[0],
        (second.prompt_ids, second.token_ids),
    ]
    assert rows[0][2] == rows[1][2] > 0 > rows[2][2]  # the calling sample solved the task
