"""Reading each role's action out of its completion.

The writer and the refactorer answer with code: their action is the definitions the code task's
`extract_code` reads (the entry point, the helpers they define, imports). The reviewer answers in
prose: its action is the review cleaned of chat boilerplate and code blocks (the reviewer comments,
it does not rewrite: a pasted fix would make the refactorer a copyist), cut to a word budget.
"""

from __future__ import annotations

import re

from orchestry.envs.code.extract import extract_code
from orchestry.envs.code.problems import Problem

# a fenced block, or an unterminated one running to the end of the text
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_OPENER = re.compile(
    r"^(sure|certainly|of course|okay|ok|absolutely|great)\b[^\n]{0,40}?[!,.:]\s*"
    r"|^(here('s| is| are)|below is|this is)\b[^\n:]{0,60}\b(review|comments?|feedback|"
    r"issues|notes)\b[^\n:]{0,20}:\s*",
    re.IGNORECASE,
)
_CLOSER = re.compile(
    r"^((let me know|i hope (you|this|that)|hope (this|that) helps|feel free|"
    r"is there anything)\b).*$",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^(#{1,6}\s*|\*\*)?\s*(code\s+)?review\s*(\*\*)?\s*:?\s*(\*\*)?$", re.I)


def function_code(text: str, problem: Problem) -> str:
    """The writer's or refactorer's code: the definitions in its completion ("" when none)."""
    return extract_code(text, keep=[problem.main.name])


def clean_review(text: str, max_words: int) -> str:
    """A review's prose: code blocks, chat openers and closers and a bare "Review:" heading
    removed, lines trimmed, blank lines collapsed, cut after `max_words` words."""
    lines = [line.strip() for line in _FENCE.sub("\n", text.replace("\r\n", "\n")).split("\n")]
    kept: list[str] = []
    for line in lines:
        if not any(kept):  # "Sure! Here is my review:" is two openers
            line = _OPENER.sub("", _OPENER.sub("", line).strip()).strip()
            if _HEADING.match(line):
                continue
        if _CLOSER.match(line) or (not line and (not kept or not kept[-1])):
            continue
        kept.append(line)
    return _first_words("\n".join(kept).strip(), max_words)


def _first_words(text: str, n: int) -> str:
    """`text` up to its n-th word, line breaks kept."""
    words = list(re.finditer(r"\S+", text))
    if len(words) <= n:
        return text
    return text[: words[n - 1].end()]


def word_count(text: str) -> int:
    return len(text.split())
