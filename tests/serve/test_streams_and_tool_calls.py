"""Without a model: token streams (what may be sent while tokens come), client tools read from
the agents' tool-call protocol, the conversation with tool calls as the agent sees it, the request
checks of tools and completions, and a streamed batch through the real worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import sampling

from orchestry.agents.base import Generation
from orchestry.serve import schema
from orchestry.serve.batcher import Batcher, BatchSettings
from orchestry.serve.errors import RequestError
from orchestry.serve.metrics import ServeMetrics
from orchestry.serve.models import TEXT_ROLE, Served
from orchestry.serve.streaming import TokenStream
from orchestry.serve.tool_calls import ToolOffer, chat_messages

END = 0  # the fake tokenizer's end of sequence; any other id is a character


def decode(ids: list[int]) -> str:
    text = []
    for i in ids:
        if i == END:
            break
        text.append(chr(i))
    return "".join(text)


def streamed(text: str, **kw) -> list[str]:
    """The pieces a stream sends while `text` comes character by character."""
    pieces: list[str] = []
    stream = TokenStream(decode, emit=pieces.append, **kw)
    for c in text:
        stream.add(ord(c))
    assert stream.sent == "".join(pieces)
    return pieces


def test_a_stream_sends_each_token_and_never_a_stop_string_or_part_of_one():
    assert streamed("Hi there", stop=()) == list("Hi there")
    pieces = streamed("Hello ENd, Hello END and more", stop=["END"])
    assert "".join(pieces) == "Hello ENd, Hello "
    assert "ENd" in pieces  # "E", then "EN", might have begun "END": held until "d" came
    assert streamed("abcx", stop=["bcd"]) == ["a", "bcx"]
    assert streamed("abc", stop=["c", "bcd"]) == ["a", "b"]  # the first stop met ends it


def test_a_stream_with_tools_holds_everything_from_a_call_on():
    assert "".join(streamed('Sure. <TOOL name="f">{}</tool> x', stop=(), before_call=True)) == (
        "Sure. "
    )
    assert "".join(streamed("a <to be or not", stop=(), before_call=True)) == "a <to be or not"


def test_a_stream_holds_an_unfinished_character_and_restarts_only_unsent():
    pieces: list[str] = []
    stream = TokenStream(lambda ids: "ab\ufffd"[: len(ids) + 1], (), pieces.append)
    stream.add(1)
    stream.add(2)
    assert pieces == ["ab"]
    assert not stream.restart()
    quiet = TokenStream(decode, ("x",), pieces.append)
    quiet.add(ord("x"))
    assert quiet.restart()


WEATHER = schema.Function(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
SUM = schema.Function(name="add", parameters={"type": "object", "properties": {"a": {}, "b": {}}})


@pytest.mark.parametrize(
    ("text", "named", "content", "call"),
    [
        (
            'Let me look. <tool name="get_weather">{"city": "Paris"}</tool>',
            None,
            "Let me look. ",
            ("get_weather", {"city": "Paris"}),
        ),
        ("<tool name=GET_WEATHER>Paris</tool>", None, None, ("get_weather", {"city": "Paris"})),
        (
            '<tool name="add">\n```json\n{"a": 1, "b": 2}\n```\n</tool>',
            None,
            None,
            ("add", {"a": 1, "b": 2}),
        ),
        ('<tool name="python">print(1)</tool>', None, '<tool name="python">print(1)</tool>', None),
        ("It is sunny.", None, "It is sunny.", None),
        ("Paris", "get_weather", None, ("get_weather", {"city": "Paris"})),
        ('<tool name="add">{"a": 1}</tool>', "get_weather", None, ("get_weather", {"a": 1})),
    ],
)
def test_tool_calls_are_read_from_the_agents_protocol(text, named, content, call):
    got_content, calls = ToolOffer((WEATHER, SUM), named).read(text)
    assert got_content == content
    if call is None:
        assert calls is None
        return
    assert calls is not None and len(calls) == 1
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == call[0]
    assert json.loads(calls[0]["function"]["arguments"]) == call[1]


def test_arguments_that_are_no_json_object_are_passed_as_written():
    _, calls = ToolOffer((SUM,)).read('<tool name="add">one and two</tool>')
    assert calls is not None and calls[0]["function"]["arguments"] == "one and two"


def test_the_conversation_shows_calls_and_results_as_the_agents_saw_their_tools():
    req = schema.parse_chat(
        {
            "model": "main",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            "tools": [{"type": "function", "function": WEATHER.model_dump()}],
        }
    )
    messages = chat_messages(req.messages, ToolOffer.of(req))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].startswith("Be brief.\n\nYou can call these functions")
    assert "- get_weather: The weather in a city Arguments: {" in messages[0]["content"]
    assert messages[2]["content"] == '<tool name="get_weather">{"city":"Paris"}</tool>'
    assert messages[3]["content"] == '<result name="get_weather">\nsunny\n</result>'
    none = schema.parse_chat({**req.model_dump(exclude_none=True), "tool_choice": "none"})
    assert ToolOffer.of(none) is None  # "none": the functions stay out of the prompt


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
HI = [{"role": "user", "content": "hi"}]
CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
BAD_CHAT = [  # (id, changes, param)
    ("required", {"tools": [TOOL], "tool_choice": "required"}, "tool_choice"),
    ("choice-without-tools", {"tool_choice": "auto"}, "tool_choice"),
    (
        "named-undeclared",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
        "tool_choice.function.name",
    ),
    (
        "tool-not-function",
        {"tools": [{"type": "code", "function": TOOL["function"]}]},
        "tools.0.type",
    ),
    (
        "tool-bad-name",
        {"tools": [{"type": "function", "function": {"name": "no spaces"}}]},
        "tools.0.function.name",
    ),
    ("tools-twice", {"tools": [TOOL, TOOL]}, "tools.1.function.name"),
    (
        "strict",
        {"tools": [{"type": "function", "function": {"name": "f", "strict": True}}]},
        "tools.0.function.strict",
    ),
    ("tools-empty", {"tools": []}, "tools"),
    ("parallel-a-string", {"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    (
        "tool-without-id",
        {"messages": [*HI, CALLED, {"role": "tool", "content": "1"}]},
        "messages.2.tool_call_id",
    ),
    (
        "tool-unknown-id",
        {"messages": [*HI, CALLED, {"role": "tool", "content": "1", "tool_call_id": "zz"}]},
        "messages.2.tool_call_id",
    ),
    (
        "tool-first",
        {"messages": [{"role": "tool", "content": "1", "tool_call_id": "c1"}]},
        "messages.0.tool_call_id",
    ),
    ("user-with-calls", {"messages": [{**CALLED, "role": "user"}]}, "messages.0.tool_calls"),
    ("assistant-no-content", {"messages": [*HI, {"role": "assistant"}]}, "messages.1.content"),
    ("functions", {"functions": [TOOL["function"]]}, "functions"),
]


@pytest.mark.parametrize(
    ("changes", "param"), [b[1:] for b in BAD_CHAT], ids=[b[0] for b in BAD_CHAT]
)
def test_a_bad_tools_request_is_a_400_naming_the_field(changes, param):
    with pytest.raises(RequestError) as err:
        schema.parse_chat({"model": "main", "messages": HI, **changes})
    assert err.value.status == 400 and err.value.param == param, err.value.message


class Stepping:
    """Writes a fixed text per prompt, one character a step, reporting each step within
    `streaming` (as transformers' streamer reports the LoRA team's)."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts, self.on_step, self.steps_before_return = texts, None, 0

    @contextmanager
    def streaming(self, on_step) -> Iterator[None]:
        self.on_step = on_step
        yield
        self.on_step = None

    def generate(self, requests, spec):
        texts = [self.texts[r.messages[-1]["content"]] for r in requests]
        ids = [[ord(c) for c in t] + [END] for t in texts]
        for step in range(max(map(len, ids))):
            if self.on_step is not None:
                self.on_step([row[step] if step < len(row) else END for row in ids])
        return [
            Generation(r.agent, [t], [i], [1, 2], 0.0, len(i))
            for r, t, i in zip(requests, texts, ids, strict=True)
        ]


def test_a_streamed_batch_sends_each_request_its_own_text_as_it_comes():
    gen = Stepping({"a": "one two STOP three", "b": "plain text"})
    served = Served(
        gen,
        ["main"],
        None,
        None,
        streaming=gen.streaming,
        decode=lambda agent, ids: decode(ids),
        text_prompts=True,
    )
    batcher = Batcher(served, BatchSettings(2, 8, 1.0), ServeMetrics())  # one batch of both
    pieces: dict[str, list[str]] = {"a": [], "b": []}
    spec = sampling(max_new_tokens=32, stop=("STOP",))
    jobs = [
        served.job("main", [{"role": "user", "content": "a"}], spec, None, emit=pieces["a"].append),
        served.job(
            "main", [{"role": TEXT_ROLE, "content": "b"}], spec, None, emit=pieces["b"].append
        ),
    ]
    batcher.submit_all(jobs)
    batcher.start()
    try:
        replies = [j.future.result(10) for j in jobs]
    finally:
        batcher.close()
    assert replies[0].text == "one two " and replies[0].finish_reason == "stop"
    assert replies[1].text == "plain text"
    assert pieces["a"] == list("one two ") and pieces["b"] == list("plain text")
