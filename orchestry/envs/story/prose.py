"""Reading story text: a completion cleaned to its prose, and prose cut into the units the reward
counts (paragraphs, sentences, words, content words, names).

Plain-text heuristics with small word lists, deterministic and fast (the reward runs on every sample
of every training step); they are approximations, documented where they matter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PARAGRAPH_BREAK = "\n\n"
"""What separates paragraphs, and so the roles' parts in the joined story."""

# A completion's chat boilerplate, line by line: what a model says around its prose.
_OPENERS = (
    re.compile(
        r"^(sure|certainly|of course|okay|ok|absolutely|great|here you go)\s*[!,.:]\s*", re.I
    ),
    re.compile(
        r"^(here('s| is| are)|below is|this is)\b[^:.!]{0,60}\b(story|part|opening|ending|middle|"
        r"continuation|version|paragraph|draft|revision)\b[^:.!]{0,30}[:.!]\s*",
        re.IGNORECASE,
    ),
)
_CLOSER = re.compile(
    r"^((let me know|i hope (you|this|that)|hope you|feel free|i('d| would) be happy|"
    r"would you like|is there anything)\b|(please )?note\s*:).*$",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^(#{1,6}\s+.*|\*\*[^*]{1,80}\*\*:?|__[^_]{1,80}__|title\s*:.*)$", re.I)
_LABELS = (
    r"part \d+|the (opening|middle|ending)|opening|middle|ending|story|my part|revised part|"
    r"writer|editor|narrator"
)
_QUOTES = {'"': '"', "'": "'", "“": "”", "‘": "’"}

_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’)])\s+")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are around as at away back be
    became because been before began being below between both but by came can could day did do
    does doing down during each even ever every far few for from get got had has have having he
    her here hers herself him himself his how i if in into is it its itself just know knew like
    made make many may me more most much must my myself never new next no nor not now of off
    often on once one only or other our ours out over own said same saw say see she should so
    some something still such than that the their theirs them then there these they thing things
    this those through time to too took under until up upon us very was way we went were what
    when where which while who whom why will with without would yet you your yours""".split()
)
"""Words too common to show that one part carries another's content forward."""

_NOT_NAMES = STOPWORDS | frozenset(
    """suddenly finally together later soon inside outside nobody everyone someone today tonight
    tomorrow yesterday meanwhile instead perhaps maybe still once long oh yes hello hi dear mr mrs
    ms dr miss sir god monday tuesday wednesday thursday friday saturday sunday january february
    march april june july august september october november december let title chapter part
    story end""".split()
)


def clean_part(text: str, roles: Sequence[str] = ()) -> str:
    """A completion's prose: chat openers and closers, headings, titles, labels (`Part 2:`, a role's
    name as in `Editor:`, `roles` naming the team's) and the quotes around the whole text removed;
    paragraphs separated by one blank line, lines trimmed."""
    names = "|".join([_LABELS, *(re.escape(r) for r in roles)])
    label = re.compile(rf"^(\*\*)?({names})(\*\*)?\s*:(\*\*)?\s*", re.IGNORECASE)
    lines = [line.strip() for line in text.replace("\r\n", "\n").split("\n")]
    kept: list[str] = []
    for line in lines:
        if _HEADING.match(line) or _CLOSER.match(line):
            continue
        if not any(kept):  # the first words: a chat opener may precede the prose on its line
            for opener in _OPENERS:
                line = opener.sub("", line)
        line = label.sub("", line).strip()
        if line in ("---", "***") or (not any(kept) and not line):
            continue
        kept.append(line)
    paragraphs = [" ".join(p.split()) for p in "\n".join(kept).split("\n\n")]
    body = PARAGRAPH_BREAK.join(p for p in paragraphs if p)
    if len(body) >= 2 and _QUOTES.get(body[0]) == body[-1] and body.count(body[0]) <= 2:
        body = body[1:-1].strip()
    return body


def paragraphs(text: str) -> list[str]:
    """The non-empty paragraphs (blocks between blank lines)."""
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def sentences(text: str) -> list[str]:
    """The sentences, cut after . ! or ? (and any closing quote) followed by white space."""
    return [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]


def words(text: str) -> list[str]:
    """The words, as written."""
    return _WORD.findall(text)


def _stem(word: str) -> str:
    """A crude stem so `sailed`, `sails` and `sailing` meet; only used to compare texts."""
    w = word.lower().replace("’", "'")
    w = w.removesuffix("'s")
    for suffix in ("ing", "ed"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            return w[: -len(suffix)]
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def content_words(text: str) -> set[str]:
    """Stems of the words that carry content (three letters or more, not a stop word)."""
    return {_stem(w) for w in words(text) if len(w) >= 3 and w.lower() not in STOPWORDS}


def names(text: str) -> set[str]:
    """Capitalised words that look like names: inside a sentence, or opening one when the word
    never appears in lower case in `text` (`Suddenly` and `The` are not names; `Tom` is)."""
    lower = {w.lower() for w in words(text) if w[0].islower()}
    found: set[str] = set()
    for sentence in sentences(text):
        for index, word in enumerate(words(sentence)):
            word = word.removesuffix("'s").removesuffix("’s")
            if not (word[:1].isupper() and word[1:].islower() and len(word) >= 2):
                continue
            if word.lower() in _NOT_NAMES or word.lower().endswith("ly"):
                continue
            if index > 0 or word.lower() not in lower:
                found.add(word)
    return found


def mentions(text: str, name: str) -> bool:
    """Whether `name` appears in `text` as a word (possessive included)."""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None
