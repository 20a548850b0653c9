"""The reflection step of prompt-as-policy learning: what the reflector reads, and how its answer is read.

`reflection_messages` shows a reflector LLM the best and the worst episodes of a batch (each agent's
answer, the total reward, the reward's parts and the environment's notes) next to the instructions the
team already follows, and asks for one new short instruction per agent. `parse_rules` reads those
instructions back from whatever the reflector wrote, tolerating bullets, numbering and markdown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestry.agents.base import Generator, GenRequest, SamplingSpec

ANSWER_CHARS = 600
"""Most characters of one agent's answer shown to the reflector."""
NOTES_CHARS = 800
"""Most characters of one episode's notes shown to the reflector."""
RULE_CHARS = 200
"""Most characters kept of one proposed instruction."""
SHOWN = 2
"""Best and worst episodes shown (each)."""

SYSTEM = (
    "You coach a team of AI agents that work together on tasks. Their weights cannot change; "
    "what you can change is a short list of instructions added to each agent's system prompt. "
    "Study what separated the high-reward episodes from the low-reward ones and write "
    "instructions that would raise the team's reward."
)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def _number(x: Any) -> str:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def _pick(episodes: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """Up to `SHOWN` best and `SHOWN` worst episodes by total, never the same episode twice."""
    ranked = sorted(episodes, key=lambda e: e.outcome.total, reverse=True)
    n_best = min(SHOWN, (len(ranked) + 1) // 2)
    best = ranked[:n_best]
    rest = ranked[n_best:]
    worst = rest[-SHOWN:][::-1] if rest else []
    return best, worst


def _episode_text(label: str, episode: Any, agents: Sequence[str]) -> str:
    out = episode.outcome
    task_id = getattr(episode.task, "id", None)
    where = f"task {task_id}, " if task_id is not None else ""
    lines = [f"### {label} ({where}total reward {out.total:.3g})"]
    parts = out.record.get("reward") if isinstance(out.record, Mapping) else None
    if isinstance(parts, Mapping) and parts:
        lines.append("Reward parts: " + ", ".join(f"{k}={_number(v)}" for k, v in parts.items()))
    if out.notes.strip():
        lines.append("Notes from the environment:\n" + _clip(out.notes, NOTES_CHARS))
    for agent in agents:
        answer = episode.texts.get(agent, "")
        lines.append(f"{agent}'s answer:\n" + (_clip(answer, ANSWER_CHARS) or "(empty)"))
    return "\n".join(lines)


def reflection_messages(
    episodes: Sequence[Any],
    agents: Sequence[str],
    rules: Mapping[str, Sequence[str]],
    only: str | None = None,
) -> list[dict[str, str]]:
    """The reflector's chat: the batch's best and worst episodes, the current rules, the request.

    `episodes` are `prompt_policy.Episode`s (anything with task, texts, outcome); `rules` maps an
    agent to the instructions it follows now. With `only`, the request is for that agent's
    instruction alone, answered as the bare instruction.
    """
    if not episodes:
        raise ValueError("reflection_messages needs at least one episode")
    best, worst = _pick(episodes)
    blocks = [f"The team: {', '.join(agents)}. Episodes from the latest batch follow."]
    blocks += [_episode_text(f"Good episode {i + 1}", e, agents) for i, e in enumerate(best)]
    blocks += [_episode_text(f"Poor episode {i + 1}", e, agents) for i, e in enumerate(worst)]
    current = []
    for agent in agents:
        mine = list(rules.get(agent, ()))
        listed = "\n".join(f"  {i + 1}. {r}" for i, r in enumerate(mine)) if mine else "  (none)"
        current.append(f"{agent}:\n{listed}")
    blocks.append("Instructions each agent follows now:\n" + "\n".join(current))
    if only is not None:
        blocks.append(
            f"Write one new short instruction for {only} (one sentence, under 30 words) that its "
            "current instructions do not already say. Answer with the instruction only."
        )
    else:
        blocks.append(
            "Write exactly one new short instruction for each agent (one sentence, under 30 words) "
            "that the current instructions do not already say. Answer with one line per agent in "
            "the form `<agent>: <instruction>` and nothing else, for the agents "
            + ", ".join(agents)
            + "."
        )
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(blocks)},
    ]


_LEAD = r"^[\s>#*_\-•·\d.)\]]*"
"""Bullets, numbering, quote marks and markdown before the agent's name."""
_WRAP = r"[\s*_`\"'\[\]<>()]*"
"""Markdown, quotes and brackets around the agent's name."""
_SEP = r"\s*(?::|-|–|—|=|\|)+\s*"
"""What separates the name from the instruction."""
_STRIP = "\"'`“”‘’*_ \t"


def parse_rules(text: str, agents: Sequence[str]) -> dict[str, str]:
    """One instruction per agent from the reflector's `text` (the first line naming each agent).

    Tolerates `aux: ...`, `- **main**: ...`, `1. main - ...`, `<main>: ...` and `Agent main: ...`;
    agent names match case-insensitively; lines naming no agent are ignored; quotes and markdown
    are stripped; each instruction is capped at `RULE_CHARS` characters; empty ones are dropped.
    """
    names = sorted(agents, key=len, reverse=True)  # `aux1` before `aux`
    alt = "|".join(re.escape(a) for a in names)
    pattern = re.compile(
        _LEAD + r"(?:agent\s+)?" + _WRAP + rf"({alt})" + _WRAP + _SEP + r"(.*)$", re.IGNORECASE
    )
    canonical = {a.lower(): a for a in agents}
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        agent = canonical[m.group(1).lower()]
        rule = re.sub(r"\*\*|__|`", "", m.group(2)).strip(_STRIP)
        rule = re.sub(r"\s+", " ", rule)[:RULE_CHARS].rstrip()
        if rule and agent not in out:
            out[agent] = rule
    return out


ECHOES = (
    "good episode",
    "poor episode",
    "reward parts",
    "notes from the environment",
    "instructions each agent follows",
    "write one new",
    "write exactly one",
    "the team:",
)
"""How the reflector's own prompt begins its lines (`reflection_messages`): a line that begins so is
an echo of the prompt, often with other task names or numbers, never an instruction."""


def first_instruction(text: str, shown: str = "") -> str:
    """The first line of prose in a bare answer, cleaned; code, fences, headings, lines copied
    from what the reflector was `shown` and lines shaped like the prompt's own (`ECHOES`) are
    skipped."""
    for line in text.splitlines():
        line = re.sub(_LEAD, "", line).strip(_STRIP)
        if len(line.split()) < 3 or line.startswith(("def ", "import ", "return ", "```", "#")):
            continue
        if line in shown or line.lower().startswith(ECHOES):  # a small model echoes its prompt
            continue
        line = re.sub(r"\*\*|__|`", "", line)
        return re.sub(r"\s+", " ", line)[:RULE_CHARS].rstrip()
    return ""


def propose(
    reflector: Generator,
    episodes: Sequence[Any],
    agents: Sequence[str],
    rules: Mapping[str, Sequence[str]],
    sampling: SamplingSpec,
) -> tuple[dict[str, str], list[str], int]:
    """One new instruction per agent: one reflection for the whole team, then, for each agent it
    left out (a small model rarely keeps the `<agent>: ...` form), one reflection for that agent
    alone, read as a bare instruction. Returns the instructions, the reflector's texts and the
    tokens it generated."""
    reply = reflector.generate(
        [GenRequest("reflector", reflection_messages(episodes, agents, rules), 1)], sampling
    )[0]
    texts, tokens = list(reply.texts[:1]), reply.new_tokens
    proposed = parse_rules(texts[0] if texts else "", agents)
    missing = [a for a in agents if a not in proposed]
    if missing:
        asks = [
            GenRequest("reflector", reflection_messages(episodes, agents, rules, only=a), 1)
            for a in missing
        ]
        for agent, ask, gen in zip(missing, asks, reflector.generate(asks, sampling), strict=True):
            tokens += gen.new_tokens
            texts += gen.texts[:1]
            shown = "\n".join(m["content"] for m in ask.messages)
            rule = first_instruction(gen.texts[0] if gen.texts else "", shown)
            if rule:
                proposed[agent] = rule
    return {a: proposed[a] for a in agents if a in proposed}, texts, tokens
