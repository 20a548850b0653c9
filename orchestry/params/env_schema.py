"""The `env` and `prepare` sections of params.yaml: the environment the team works on, its settings
and the task sets split for it.

One key, `env.name`, selects the environment for every stage (prepare reads its task sets, train and
the evaluation stages build it); the subsections hold each environment's own settings and are read
only when that environment is selected.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import Field, field_validator, model_validator

from orchestry.envs.catalog import TOOL_NAMES, all_sets, env_entry
from orchestry.params.section import Section

# Sets of held-out problems only: their n_train must be 0 (envs/code/generated/catalogue.py).
TEST_ONLY_SETS = ("gen_unseen", "gen_compose", "gen_unseen_balanced")
OVERLAPPING_SETS = (
    ("humaneval", "humaneval_paper"),
    ("gen", "gen_train"),
    ("gen", "gen_compose"),
    ("gen_unseen", "gen_unseen_balanced"),
)
"""Pairs of sets that hold the same problems: one of each pair at most is used."""
CODE_DEFAULT_AGENTS = list(env_entry("code").roles)
"""`model.agents`' default: the code task's roles (another env then plays with its own)."""


def _ordered_range(value: list[int], key: str) -> list[int]:
    if value[0] > value[1]:
        raise ValueError(f"{key} must be [low, high] with low <= high, got {value}")
    return value


class SetSplit(Section):
    """How many problems of one set go to each split."""

    n_train: int = Field(ge=0, description="Problems in the train split (0 = none).")
    n_test: int = Field(ge=0, description="Problems in the test split (0 = none).")


class PrepareParams(Section):
    """Which problems go to the train and test splits (a seeded shuffle, disjoint)."""

    sets: dict[str, SetSplit] = Field(
        {
            "coop": SetSplit(n_train=24, n_test=8),
            "humaneval": SetSplit(n_train=0, n_test=0),
            "story": SetSplit(n_train=24, n_test=12),
            "tldr": SetSplit(n_train=24, n_test=12),
        },
        description="Task sets used and their split sizes; only the sets of `env.name` are read "
        "(code: `coop` 36 two-role problems, `humaneval` 164, `humaneval_paper` the same 164 in "
        "the paper's fixed split (train: the first n_train of HumanEval/33-162, test: the first "
        "n_test of HumanEval/0-31), `coop3` 7 three-role problems, `gen` 2149 generated "
        "problems of the trained families, `gen_unseen` 456 of the held-out families (test "
        "only: n_train 0; docs/generated_problems.md), `gen_train` 1909 (`gen` less its held-out "
        "pairs), `gen_compose` 240 held-out pairs of the trained families (ids `gen_compose/...`; "
        "test only) and `gen_unseen_balanced` 190 of `gen_unseen`, no family over 40% (test "
        "only): the team-vs-single comparison's sets; story: `story` 40 themes; writing: "
        "`tldr` 40 posts, `arxiv` 40 abstracts); a set left out is not used.",
    )
    split_seed: int | None = Field(
        None,
        description="Seed of the sets' shuffle (which problems are train and test); null = `seed`. "
        "Fix it to compare training seeds on the same held-out problems.",
    )
    drop_over_budget: bool = Field(
        False,
        description="Code sets: drop every problem whose reference answer, as an agent writes it "
        "(each role's part, and the whole program for the single agent), is longer than the "
        "budget (`budget_tokens`, by default `sampling.max_new_tokens`) in tokens of "
        "`model.name`'s tokenizer; summary.json counts what was dropped, per set.",
    )
    budget_tokens: int | None = Field(
        None,
        ge=1,
        description="The budget `drop_over_budget` drops by, in tokens; null = "
        "`sampling.max_new_tokens`. Set it to keep one budget's sets under another "
        "`sampling.max_new_tokens` (a run with 512 new tokens on the 256-token sets). Read only "
        "with `drop_over_budget` true.",
    )

    @field_validator("sets")
    @classmethod
    def _known_sets(cls, sets: dict[str, SetSplit]) -> dict[str, SetSplit]:
        unknown = sorted(set(sets) - all_sets())
        if unknown:
            raise ValueError(
                f"unknown task sets {unknown}; the registered environments read "
                f"{', '.join(sorted(all_sets()))}"
            )
        return sets

    @model_validator(mode="after")
    def _splits_fit_the_sets(self) -> PrepareParams:
        for name in TEST_ONLY_SETS:
            if name in self.sets and self.sets[name].n_train != 0:
                raise ValueError(
                    f"prepare.sets.{name}.n_train must be 0, got {self.sets[name].n_train}: "
                    f"{name} holds held-out problems only (test split); train on `gen` or "
                    "`gen_train`"
                )
        for pair in OVERLAPPING_SETS:
            both = [n for n in pair if n in self.sets]
            if len(both) == 2 and all(self.sets[n].n_train + self.sets[n].n_test for n in both):
                raise ValueError(
                    f"prepare.sets: {pair[0]} and {pair[1]} hold the same problems; give only "
                    "one of them n_train or n_test > 0"
                )
        return self


class StoryParams(Section):
    """The story task (`env.name: story`): roles write their parts of one story on a theme."""

    judge: Literal["offline", "claude"] = Field(
        "offline",
        description="Who scores quality: `offline` (measurable text properties, no API) or "
        "`claude` (the judge prompt in data/story/judge_prompt.md, through the anthropic section; "
        "a failed call falls back to the offline score and says so in the row).",
    )
    quality: float = Field(0.4, ge=0.0, description="Weight of the judge's quality score.")
    collaboration: float = Field(
        0.4,
        ge=0.0,
        description="Weight of collaboration: each part builds on the earlier ones (entities "
        "carried forward, no contradiction, no restart).",
    )
    efficiency: float = Field(
        0.2,
        ge=0.0,
        description="Weight of efficiency: the story's turns (paragraphs) against `turns_range`.",
    )
    turns_range: list[int] = Field(
        [3, 6],
        min_length=2,
        max_length=2,
        description="[low, high] story turns (paragraphs): 1 within or under, less per turn over.",
    )
    words_range: list[int] = Field(
        [60, 300],
        min_length=2,
        max_length=2,
        description="[low, high] words of the whole story the offline judge counts as in range.",
    )

    @model_validator(mode="after")
    def _ranges(self) -> StoryParams:
        _ordered_range(self.turns_range, "turns_range")
        _ordered_range(self.words_range, "words_range")
        return self


class WritingParams(Section):
    """The paper's two-agent writing tasks (`env.name: writing`): TL;DR and arXiv expansion, scored
    by the paper's level reward (envs/writing/reward.py names the source of every constant)."""

    structure: float = Field(
        0.5, ge=0.0, description="Weight of each part's word count within its bounds (paper 0.5)."
    )
    coordination: float = Field(
        1.0,
        ge=0.0,
        description="Weight of the length ratio part 2 / part 1 in the task's band (paper 1.0).",
    )
    vocabulary: float = Field(
        0.5,
        ge=0.0,
        description="Weight of the unique-word ratio part 2 / part 1 in the band (paper 0.5).",
    )
    coherence: float = Field(
        1.0,
        ge=0.0,
        description="Weight of transition words and word overlap between the parts (paper 1.0).",
    )
    grounding: float = Field(
        0.0,
        ge=0.0,
        description="Weight of the parts' content words found in the source (ours; 0 = the paper's "
        "reward; logged either way).",
    )
    length_scale: float = Field(
        0.5,
        gt=0.0,
        description="The paper's word bounds (set for 256 new tokens) times this; 0.5 suits "
        "`sampling.max_new_tokens` 128.",
    )
    gated: bool = Field(
        False,
        description="true = the paper's rule (structure all-or-nothing, each level counts only "
        "when the one before is nonzero); false = every part graded on its own, so a small "
        "model's mediocre text still earns partial credit.",
    )


class CodeReviewParams(Section):
    """The code-review workflow (`env.name: code_review`): a writer drafts the entry point, a
    reviewer comments on the draft, a refactorer returns the final code; both run the tests."""

    tests: float = Field(
        1.0, ge=0.0, description="Weight of the final code's fraction of tests passed."
    )
    syntax: float = Field(
        0.5,
        ge=0.0,
        description="Weight of the final code parsing and defining the entry point (not a stub).",
    )
    review: float = Field(
        0.5,
        ge=0.0,
        description="Weight of review quality: the draft's failing tests the final fixes, minus "
        "the passing ones it breaks (0 for an empty review).",
    )
    review_max_words: int = Field(
        80, ge=1, description="The review is cut to this many words (and asked for at most this)."
    )


class ToolsParams(Section):
    """Tools the code task's agents may call within a turn (`env.name: code`; docs/tools.md). The
    reward is unchanged: tools help only if they help."""

    enabled: bool = Field(
        False, description="true = the agents are told about the tools and may call them."
    )
    names: list[str] = Field(
        ["python", "calculator", "examples"],
        min_length=1,
        description="The tools offered (envs/tools/registry.py): `python` (a program run in the "
        "sandbox), `calculator` (arithmetic), `examples` (the task's public examples run on the "
        "draft).",
    )
    max_calls: int = Field(2, ge=1, description="Most tool calls per agent per turn.")
    max_result_chars: int = Field(
        400, ge=1, description="Each tool result is cut to this many characters."
    )

    @field_validator("names")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in TOOL_NAMES]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {', '.join(TOOL_NAMES)}")
        return names


class EnvParams(Section):
    """The environment the team works on (every stage that builds or scores it reads this)."""

    name: str = Field(
        "code",
        description="`code` (the paper's aux/main functions, sandboxed tests), `code_review` "
        "(writer, reviewer, refactorer in turn on the same problems), `story` (roles write one "
        "story on a theme), `writing` (the paper's TL;DR and abstract-expansion pairs). With any "
        "but `code`, `model.agents` left at [aux, main] means the environment's roles. Any "
        "environment of envs/catalog.py.",
    )
    rename_lone_helper: bool = Field(
        False,
        description="`code`: a helper's single function under another name counts as its helper "
        "(renamed to `aux`); false = a helper must use the asked-for name, as in the paper.",
    )
    single_prompt: Literal["plain", "helper_contract"] = Field(
        "plain",
        description="`code`: what one model alone is told (the single baseline and the trained "
        "single agent): `plain` = the entry point's signature, helpers of its own allowed; "
        "`helper_contract` = also the helper functions' names and signatures, as the team's main "
        "is told, asked to write them and the entry point (issue 57's control).",
    )
    tools: ToolsParams = ToolsParams()
    code_review: CodeReviewParams = CodeReviewParams()
    story: StoryParams = StoryParams()
    writing: WritingParams = WritingParams()

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        try:
            env_entry(name)
        except KeyError as err:
            raise ValueError(err.args[0]) from None
        return name


def environment_roles(data: object) -> object:
    """Raw params with `model.agents` at the code task's default set to the environment's roles."""
    if not isinstance(data, dict) or not isinstance(data.get("env"), dict):
        return data
    name = data["env"].get("name", "code")
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    agents = model.get("agents", CODE_DEFAULT_AGENTS)
    if isinstance(name, str) and agents == CODE_DEFAULT_AGENTS:
        try:
            roles = list(env_entry(name).roles)
        except KeyError:
            return data  # EnvParams names the bad env.name
        data = {**data, "model": {**model, "agents": roles}}
    return data


def check_environment(
    env: EnvParams, agents: list[str], curriculum: str, sets: Collection[str]
) -> None:
    """Raise ValueError when the other sections do not fit the selected environment."""
    if env.name != "code" and curriculum != "none":
        raise ValueError(f"train.curriculum {curriculum} needs env.name code")
    if env.tools.enabled and env.name != "code":
        raise ValueError(f"env.tools.enabled needs env.name code, not {env.name}")
    if env.single_prompt != "plain" and env.name != "code":
        raise ValueError(
            f"env.single_prompt {env.single_prompt} needs env.name code, not {env.name}: the "
            "other environments have no helper functions to state; set it plain"
        )
    if env.name == "writing" and len(agents) != 2:
        raise ValueError(f"env.name writing needs 2 agents, model.agents is {agents}")
    if env.name == "code_review" and len(agents) != 3:
        raise ValueError(f"env.name code_review needs 3 agents, model.agents is {agents}")
    env_sets = env_entry(env.name).sets
    if not any(s in sets for s in env_sets):
        raise ValueError(
            f"prepare.sets names no task set of env.name {env.name} (its sets: "
            f"{', '.join(env_sets)})"
        )
