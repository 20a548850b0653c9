"""Prompt-as-policy learning: the reflector's rules, the Pareto front, and `learn` on real envs."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, cpu_params

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.algos.prompt_gepa import ExploreFront, child_rules, decode, encode
from orchestry.algos.prompt_policy import (
    RULES_HEADER,
    Candidate,
    Episode,
    Prompted,
    PromptPolicySettings,
    learn,
    load_rules,
    run_episodes,
    save,
)
from orchestry.algos.prompt_reflect import first_instruction, parse_rules, reflection_messages
from orchestry.envs.base import Outcome, Roles, Turn, check_env, with_history

AGENTS = ("aux", "main")
GREEDY = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=16, do_sample=False)


def generation(agent: str, texts: list[str]) -> Generation:
    return Generation(agent, texts, [[1] * (i + 1) for i in range(len(texts))], [0], 0.0, 0)


class Echo:
    """A team whose every agent answers with the system message it was given (so an answer
    carries exactly what its instructions say); records the requests."""

    def __init__(self) -> None:
        self.calls: list[list[GenRequest]] = []

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingSpec) -> list[Generation]:
        self.calls.append(list(requests))
        out = []
        for r in requests:
            system = next((m["content"] for m in r.messages if m["role"] == "system"), "")
            out.append(generation(r.agent, [f"{system} #{i}" for i in range(r.n)]))
        return out


class Scripted:
    """A reflector that always answers `reply`; records what it was shown."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.seen: list[list[dict[str, str]]] = []

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingSpec) -> list[Generation]:
        assert {r.agent for r in requests} == {"reflector"} and all(r.n == 1 for r in requests)
        self.seen += [r.messages for r in requests]
        return [Generation("reflector", [self.reply], [[7] * 5], [0], 0.0, 5) for _ in requests]


@dataclass(frozen=True)
class Task:
    id: str
    word: str


class KeywordEnv:
    """aux and main answer a task; each earns half a point when its answer says the task's word
    (in any case). Nothing in the observation names the word: only instructions can."""

    roles = Roles(("aux",), "main")
    sequential = False  # the agents answer a turn at once

    def observe(self, task: Task, agent: str, history: Sequence[Turn] = ()) -> list[dict]:
        first = [
            {"role": "system", "content": f"You are {agent}."},
            {"role": "user", "content": f"Solve task {task.id}."},
        ]
        return with_history(first, history)

    def act(self, task: Task, agent: str, text: str) -> str:
        return text.strip()

    def score(self, batch: Sequence[tuple[Task, Mapping[str, str]]]) -> list[Outcome]:
        out = []
        for task, actions in batch:
            hits = {a: task.word in actions.get(a, "").lower() for a in self.roles.agents}
            parts = {a: 0.5 * hits[a] for a in hits}
            missing = [a for a, h in hits.items() if not h]
            notes = f"missing the key word: {', '.join(missing)}" if missing else "all good"
            total = sum(parts.values())
            out.append(Outcome(total, {"hit": total}, {"reward": parts}, notes))
        return out

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        return outcome.notes

    def reference(self, task: Task, agent: str) -> str | None:
        return None


class InOrderEnv(KeywordEnv):
    """The same task, but main answers after seeing aux's action."""

    sequential = True

    def observe_after(self, task, agent, earlier, history=()) -> list[dict]:
        seen = "\n".join(f"{a} wrote: {text}" for a, text in earlier.items())
        return [*self.observe(task, agent, history)[:-1], {"role": "user", "content": seen}]


TASKS = [Task(f"t{i}", "banana") for i in range(6)]


def settings(**changes) -> PromptPolicySettings:
    base = dict(rounds=2, minibatch=2, samples=2, pareto_tasks=3, explore=0.0, max_rules=3, seed=0)
    return PromptPolicySettings(**{**base, **changes})


def test_parse_rules_reads_messy_formats():
    text = """Here are my suggestions:
- **AUX**: "Always mention the banana."
1. main - `Return` the **result** of calling aux.
Main: a second line for main is ignored
critic: not on this team
reviewer said aux is fine
"""
    assert parse_rules(text, AGENTS) == {
        "aux": "Always mention the banana.",
        "main": "Return the result of calling aux.",
    }
    assert parse_rules("<main>: Be brief.\n* aux:   \n", AGENTS) == {"main": "Be brief."}
    assert parse_rules("Agent aux1 — use ints\naux: x", ["aux", "aux1"]) == {
        "aux1": "use ints",
        "aux": "x",
    }
    assert parse_rules("### main: " + "w" * 500, AGENTS) == {"main": "w" * 200}
    assert parse_rules("no instructions at all", AGENTS) == {}


class FrontState:
    """What GEPA's state shows a candidate selector: mean scores and the per-task front."""

    def __init__(self, means: list[float], front: dict[int, set[int]]) -> None:
        self.program_full_scores_val_set = self.per_program_tracked_scores = means
        self.front = front

    def get_pareto_front_mapping(self) -> dict[int, set[int]]:
        return self.front


def test_explore_front_takes_the_best_mean_or_explores_the_front():
    state = FrontState([0.0, 0.5, 0.5, 0.2], {0: {1}, 1: {2}, 2: {3}})
    assert ExploreFront(0.0, random.Random(0)).select_candidate_idx(state) == 1  # earliest of ties
    explorer = ExploreFront(1.0, random.Random(0))
    picks = {explorer.select_candidate_idx(state) for _ in range(40)}
    assert picks == {1, 2, 3} and explorer.explored  # front members only, never 0
    assert Candidate(4, None, 0, {}, {"t0": 1.0, "t1": 0.0, "t2": 1.0}).mean == pytest.approx(2 / 3)


def test_rules_travel_through_gepa_as_one_text_per_agent():
    rules = {"aux": ["Name it aux.", "Return   a value."], "main": []}
    text = {a: encode(r) for a, r in rules.items()}
    assert text == {"aux": "Name it aux.\nReturn a value.", "main": ""}
    assert decode(text) == {"aux": ["Name it aux.", "Return a value."]}


def test_prompted_extends_or_inserts_the_system_message():
    team = Echo()
    rules = {"aux": ["Mention fruit.", "Be brief."], "main": []}
    with_system = [{"role": "system", "content": "You are aux."}, {"role": "user", "content": "Go"}]
    no_system = [{"role": "user", "content": "Go"}]
    main_req = GenRequest("main", [{"role": "system", "content": "You are main."}], 1)
    Prompted(team, rules).generate(
        [GenRequest("aux", with_system, 2), GenRequest("aux", no_system, 1), main_req], GREEDY
    )
    sent = team.calls[0]
    block = f"{RULES_HEADER}\n1. Mention fruit.\n2. Be brief."
    assert sent[0].messages == [
        {"role": "system", "content": f"You are aux.\n\n{block}"},
        {"role": "user", "content": "Go"},
    ]
    assert sent[0].n == 2 and with_system[0]["content"] == "You are aux."  # caller's untouched
    assert sent[1].messages == [{"role": "system", "content": block}, *no_system]
    assert sent[2] is main_req  # an agent without rules passes unchanged


def test_child_rules_append_and_drop_the_oldest():
    parent = {"aux": ["a1", "a2"], "main": ["m1"]}
    assert child_rules(parent, {"aux": "a3"}, 2) == {"aux": ["a2", "a3"], "main": ["m1"]}
    assert child_rules({}, {"main": "m"}, 3) == {"main": ["m"]}
    assert parent == {"aux": ["a1", "a2"], "main": ["m1"]}


def test_run_episodes_batches_and_scores_once_in_either_order():
    team, env = Echo(), KeywordEnv()
    eps = run_episodes(Prompted(team, {"main": ["say banana"]}), env, TASKS[:2], 3, GREEDY)
    assert len(team.calls) == 1 and len(team.calls[0]) == 4  # 2 tasks x 2 agents, n=3 each
    assert [e.task.id for e in eps] == ["t0"] * 3 + ["t1"] * 3
    assert all(e.outcome.total == 0.5 and e.outcome.record["reward"]["main"] == 0.5 for e in eps)
    assert [e.new_tokens for e in eps[:3]] == [2, 4, 6]  # aux's i-th + main's i-th completion
    assert eps[1].texts["aux"] == "You are aux. #1" and eps[1].actions == {
        a: t.strip() for a, t in eps[1].texts.items()
    }

    team = Echo()
    eps = run_episodes(team, InOrderEnv(), TASKS[:2], 2, GREEDY)
    assert [len(c) for c in team.calls] == [2, 4]  # aux: one request per task; main: per sample
    assert [r.agent for r in team.calls[1]] == ["main"] * 4
    assert "aux wrote: You are aux. #1" in team.calls[1][1].messages[-1]["content"]
    assert len(eps) == 4 and eps[3].texts["aux"] == "You are aux. #1"


def test_the_envs_keep_the_contract():
    check_env(KeywordEnv(), TASKS[0], {"aux": "banana", "main": "no"})
    check_env(InOrderEnv(), TASKS[0], {"aux": "banana", "main": "no"})


def test_reflection_shows_best_and_worst_with_reward_parts_and_rules():
    env = KeywordEnv()
    answers = ["banana banana", "banana", "plain", "other", "x" * 2000]
    outcomes = env.score([(TASKS[0], {"aux": a, "main": a}) for a in answers])
    eps = [
        Episode(TASKS[0], {"aux": a, "main": a}, {"aux": a, "main": a}, o, 0)
        for a, o in zip(answers, outcomes, strict=True)
    ]
    eps[2].outcome = Outcome(0.25, {}, {"reward": {"aux": 0.25}}, "middle")
    messages = reflection_messages(eps, AGENTS, {"aux": ["Say hi."]})
    assert [m["role"] for m in messages] == ["system", "user"]
    text = messages[1]["content"]
    assert text.count("total reward 1") == 2 and "total reward 0.25" not in text
    assert text.count("total reward 0)") == 2
    assert "Reward parts: aux=0.5, main=0.5" in text and "missing the key word: aux, main" in text
    assert "x" * 600 in text and "x" * 601 not in text
    assert "1. Say hi." in text and "main:\n  (none)" in text and "`<agent>: <instruction>`" in text


def test_learn_accepts_an_instruction_that_earns_reward(tmp_path: Path):
    reflector = Scripted("aux: Always mention BANANA.\nmain: Say banana in every answer.")
    state = learn(Echo(), reflector, KeywordEnv(), TASKS, settings(), GREEDY, GREEDY)
    assert [c.id for c in state.candidates] == [0, 1] and state.best == 1
    assert state.candidates[0].mean == 0.0 and state.candidates[1].mean == 1.0
    assert len(state.candidates[1].scores) == 3
    assert state.rules() == {
        "aux": ["Always mention BANANA."],
        "main": ["Say banana in every answer."],
    }
    first, second = state.rounds
    assert first["accepted"] and (first["parent_mean"], first["child_mean"]) == (0.0, 1.0)
    assert len(first["minibatch"]) == 2 and first["proposals"] == [reflector.reply]
    assert second["parent"] == 1 and not second["accepted"]  # a repeat cannot beat 1.0
    assert [(b["agent"], b["candidate"], b["round"]) for b in state.library] == [
        ("aux", 1, 1),
        ("main", 1, 1),
    ]
    # the reflector saw the parent's episodes and rules, and the team's tokens were counted
    assert "missing the key word" in reflector.seen[0][1]["content"]
    assert "1. Always mention BANANA." in reflector.seen[1][1]["content"]
    assert state.reflector_tokens == 10 and state.team_tokens > 0
    # the same seed searches the same way
    again = learn(
        Echo(), Scripted(reflector.reply), KeywordEnv(), TASKS, settings(), GREEDY, GREEDY
    )
    assert again.rounds == state.rounds

    prompts, library = tmp_path / "prompts.json", tmp_path / "library.json"
    save(state, prompts, library)
    assert load_rules(prompts) == state.rules()
    assert len(json.loads(library.read_text())["behaviours"]) == 2
    assert json.loads(prompts.read_text())["tokens"]["reflector"] == 10


def test_learn_rejects_useless_and_unreadable_proposals():
    reflector = Scripted("aux: Think step by step.\nmain: Be concise.")
    state = learn(Echo(), reflector, KeywordEnv(), TASKS, settings(), GREEDY, GREEDY)
    assert [c.id for c in state.candidates] == [0] and state.best == 0 and state.rules() == {}
    assert all(not r["accepted"] and r["child_mean"] == 0.0 for r in state.rounds)
    assert state.library == []

    chatter = learn(Echo(), Scripted("ok"), KeywordEnv(), TASKS, settings(), GREEDY, GREEDY)
    assert [r["child_mean"] for r in chatter.rounds] == [None, None]
    assert not any(r["accepted"] for r in chatter.rounds)
    # the team-wide answer, then one ask per agent it left out; none gave an instruction
    assert [len(r["proposals"]) for r in chatter.rounds] == [3, 3]


def test_a_reflector_that_drops_the_agent_form_is_asked_per_agent():
    """A small model rarely answers `<agent>: ...`: each agent it left out is asked alone and the
    bare instruction is kept (code and too-short lines are skipped)."""
    reflector = Scripted("```\ndef f():\n```\n- Always mention BANANA in the answer.")
    state = learn(Echo(), reflector, KeywordEnv(), TASKS, settings(), GREEDY, GREEDY)
    assert state.best == 1 and state.rules() == {
        "aux": ["Always mention BANANA in the answer."],
        "main": ["Always mention BANANA in the answer."],
    }
    asks = [m[1]["content"] for m in reflector.seen[:3]]
    assert "`<agent>: <instruction>`" in asks[0]
    assert "instruction for aux" in asks[1] and "instruction for main" in asks[2]
    assert state.reflector_tokens == 2 * 3 * 5  # two rounds of three asks
    assert first_instruction("ok\n1. **Use** `aux` always.") == "Use aux always."
    echo = "The team: aux, main. Episodes follow."
    assert first_instruction(f"{echo}\nCall aux first.", shown=f"x\n{echo}\ny") == "Call aux first."
    # an echo of the prompt's own lines with another task or number in it (seen on a GPU run)
    made_up = "### Good episode 1 (task coop/primes_above, total reward 0)\nReward parts: tests=0"
    assert first_instruction(f"{made_up}\nCall aux first.", shown="") == "Call aux first."
    assert first_instruction("Write one new short instruction for main (one sentence).") == ""


def test_load_rules_names_a_bad_file(tmp_path: Path):
    bad = tmp_path / "prompts.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="prompts.json is not JSON"):
        load_rules(bad)
    bad.write_text(json.dumps({"rules": {"aux": "one string, not a list"}}))
    with pytest.raises(ValueError, match="prompts.json holds no learned rules"):
        load_rules(bad)


@pytest.mark.slow
def test_learn_with_the_embedded_model_on_the_code_env(tmp_path: Path):
    """The real team (smollm2 with an adapter per agent, one for the reflector) on a real coop
    problem in the sandbox: one round, whatever the model writes, a well-formed state."""
    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.params import parse_params
    from orchestry.stages.from_params import make_env, make_policy

    params = parse_params({"sampling": {"max_new_tokens": 24}})
    model = make_policy(cpu_params({"model": {"agents": ["aux", "main", "reflector"]}}))
    env = make_env(params)
    tasks = load_problem_dir(ROOT / "data/coop")[:2]
    sampling = SamplingSpec(temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=24)
    ticks: list[tuple[int, int]] = []
    state = learn(
        model,
        model,
        env,
        tasks,
        settings(rounds=1, minibatch=1, samples=1, pareto_tasks=1),
        sampling,
        sampling,
        progress=lambda done, total: ticks.append((done, total)),
    )
    assert ticks == [(1, 1)] and len(state.rounds) == 1
    row = state.rounds[0]
    assert row["parent"] == 0 and row["minibatch"][0] in {t.id for t in tasks}
    assert 1 <= len(row["proposals"]) <= 3 and row["accepted"] in (True, False)
    assert len(state.candidates) == 1 + row["accepted"]
    assert len(state.candidates[0].scores) == 1 and state.best in {c.id for c in state.candidates}
    assert state.team_tokens > 0 and 0 < state.reflector_tokens <= 3 * 24
    prompts, library = tmp_path / "prompts.json", tmp_path / "library.json"
    save(state, prompts, library)
    assert load_rules(prompts) == state.rules()
    saved = json.loads(prompts.read_text())
    assert saved["best"] == state.best and len(saved["candidates"]) == len(state.candidates)
