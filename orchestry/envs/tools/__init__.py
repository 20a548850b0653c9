"""Tools an agent may call within a turn (docs/tools.md).

`protocol.py`: the one tool-call text format (`<tool name="python">...</tool>`, answered by
`<result name="python">...</result>`), parsed forgivingly, and the settings of a turn's budget.
`registry.py`: the tools by name (`python`, `calculator`, `examples`), each a plain `str -> str`
callable with a description, and `ToolUse`, what an environment declares to turn them on.
`calculator.py`: safe arithmetic over the `ast` (nothing is evaluated but numbers and operators).
The joint turn (`orchestry/joint/turn.py`) runs the loop: generate, stop at `</tool>`, run, append.
"""
