"""What a completion amounts to: the written text without chat boilerplate, and a lone model's
text split into the team's two parts.

Small chat models wrap their answer ("Sure! Here is a summary:", a "**Summary**" title, quotes,
"Let me know if..."); none of that is the part the reward should measure.
"""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LABELS = (
    r"tl;?\s?dr|summary|concise summary|detailed summary|short summary|introduction|"
    r"background(?: and motivation)?|motivation|methods?|methodology|contributions?|"
    r"method and contributions|paragraph\s*\d|part\s*\d|answer|response"
)
# lines that are only a heading, a rule, a fence, a label or a title
_DROP_LINE = re.compile(
    rf"^(?:#+\s.*|[-*_=]{{3,}}|```\w*|(?:\*\*)?(?:{_LABELS})\s*:?(?:\*\*)?|title\s*:.*)$",
    re.IGNORECASE,
)
_BOLD_LINE = re.compile(r"^\*\*([^*]+)\*\*:?$")
_LABEL_PREFIX = re.compile(rf"^(?:\*\*)?(?:{_LABELS})\s*:(?:\*\*)?\s*", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_OPENER = re.compile(
    r"^(?:sure|certainly|of course|absolutely|okay|ok|alright|great)\b[!,.]*\s*", re.IGNORECASE
)
_HERE_IS = re.compile(
    r"^(?:here(?:'s| is| are)|below is|the following is)\b[^\n:]*?"
    r"\b(?:summary|summaries|paragraphs?|introduction|version|text|response|draft|revision|"
    r"tl;?\s?dr|rewrite|parts?|answer)\b[^\n:]*(?::\s*|[.!]?\s*\n\s*(?=\S)|[.!]\s+)",
    re.IGNORECASE,
)
_CLOSER = re.compile(
    r"(?:^|(?<=[.!?])\s+|\n\s*)(?:let me know|please let me know|i hope this|hope this helps|"
    r"feel free|would you like|if you (?:need|have|want|would like|'d like))\b.*$",
    re.IGNORECASE | re.DOTALL,
)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}


def _strip(text: str) -> str:
    """The text without boilerplate, titles, labels, markdown and quotes; line breaks kept."""
    text = _THINK.sub("", text).replace("<think>", "").replace("</think>", "")
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        bold = _BOLD_LINE.match(line)
        if _DROP_LINE.match(line) or (bold and len(bold.group(1).split()) <= 6):
            continue  # a heading or a title, not the text
        line = _BULLET.sub("", _LABEL_PREFIX.sub("", line))
        lines.append(line.replace("**", "").replace("__", ""))
    text = "\n".join(lines).strip()
    for _ in range(3):  # "Sure! Here is the summary:" is two openers in a row
        text = _LABEL_PREFIX.sub("", _HERE_IS.sub("", _OPENER.sub("", text))).strip()
    text = _CLOSER.sub("", text).strip()
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text


def _collapse(block: str) -> str:
    return re.sub(r"\s+", " ", block).strip()


def clean_text(text: str) -> str:
    """The written text: boilerplate, titles, labels, markdown and surrounding quotes removed;
    paragraphs kept (separated by one blank line), whitespace within them collapsed."""
    paragraphs = (_collapse(p) for p in re.split(r"\n\s*\n", _strip(text)))
    return "\n\n".join(p for p in paragraphs if p)


def split_solo(text: str) -> tuple[str, str]:
    """A lone model's text as (part 1, part 2): its first paragraph and the rest; with one
    paragraph, its first line and the rest; with one line, its sentences split at the middle."""
    stripped = _strip(text)
    for separator in (r"\n\s*\n", r"\n"):
        blocks = [b for b in (_collapse(p) for p in re.split(separator, stripped)) if b]
        if len(blocks) >= 2:
            return blocks[0], "\n\n".join(blocks[1:])
    whole = _collapse(stripped)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", whole) if s]
    if len(sentences) < 2:
        return whole, ""
    middle = len(sentences) // 2
    return " ".join(sentences[:middle]), " ".join(sentences[middle:])
