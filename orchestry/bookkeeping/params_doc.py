"""Documents generated from the params schema (orchestry/params/schema.py, their one source): the params reference (docs/params.md)
and the JSON schema Snakemake validates params.yaml against.

`python -m orchestry params-doc` rewrites the section between the markers; `--check` (and
tests/test_params.py) fail when docs/params.md is stale.
"""

from __future__ import annotations

import json
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from orchestry.params import Params


def json_schema() -> dict[str, Any]:
    """The JSON schema Snakemake validates params.yaml against."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Params.model_json_schema()}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


PARAMS_DOC_BEGIN = "<!-- params:begin -->"
PARAMS_DOC_END = "<!-- params:end -->"
_GENERATED_NOTE = "<!-- generated from orchestry/params/schema.py by `python -m orchestry params-doc`; do not edit -->"


def _section_model(annotation: Any) -> type[BaseModel] | None:
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _type_text(annotation: Any, nested_path: str | None = None) -> str:
    """`int`, `one of a, b`, `list of str`, `map str → str` ... for the type column."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        key = _type_text(args[0]).removeprefix("one of ")
        value = f"`{nested_path}`" if nested_path else _type_text(args[1])
        return f"map {key} → {value}"
    if origin is Annotated:  # PositiveInt and the like: the base type and its bounds
        return _type_text(args[0]) + _bounds_text(list(args[1:]))
    if args and origin in (Union, UnionType):  # int ≥ 1 or `auto`
        return " or ".join(_type_text(a).removeprefix("one of ") for a in args)
    if annotation is type(None):
        return "`null`"
    return getattr(annotation, "__name__", str(annotation))


def _bounds_text(metadata: list[Any]) -> str:
    """The numeric range or minimum length from a field's constraints (`≥ 1`, `in (0, 5]`)."""
    lo = hi = None
    lo_open = hi_open = False
    min_len = None
    for m in metadata:
        for attr, is_open in (("ge", False), ("gt", True)):
            if getattr(m, attr, None) is not None:
                lo, lo_open = getattr(m, attr), is_open
        for attr, is_open in (("le", False), ("lt", True)):
            if getattr(m, attr, None) is not None:
                hi, hi_open = getattr(m, attr), is_open
        if getattr(m, "min_length", None) is not None:
            min_len = m.min_length
    if min_len is not None:
        return f", ≥ {min_len} item{'s' if min_len != 1 else ''}"
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{_number(lo)}, {_number(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '≥'} {_number(lo)}"
    if hi is not None:
        return f" {'<' if hi_open else '≤'} {_number(hi)}"
    return ""


def _default_text(field: Any) -> str:
    """The default as params.yaml would spell it (YAML flow style)."""
    if field.is_required():
        return "required"
    value = to_jsonable_python(field.get_default(call_default_factory=True))
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return "`" + text.removesuffix("...\n").strip() + "`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _doc_of(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def _section_tables(model: type[BaseModel], path: str, title: str) -> list[str]:
    """One table for `model`'s own keys, then one per nested section (depth first)."""
    rows, nested = [], []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        sub = _section_model(field.annotation)
        if sub is not None:
            nested.append((sub, key, f"`{key}`"))
            continue
        args = get_args(field.annotation)
        item = _section_model(args[1]) if get_origin(field.annotation) is dict else None
        nested_path = f"{key}.<name>" if item is not None else None
        if item is not None:
            nested.append((item, nested_path, f"`{nested_path}`"))
        kind = _type_text(field.annotation, nested_path) + _bounds_text(field.metadata)
        desc = field.description or ""
        rows.append(f"| `{key}` | {_cell(kind)} | {_cell(_default_text(field))} | {_cell(desc)} |")
    lines: list[str] = []
    if rows:
        lines += (
            [f"### {title}", "", _doc_of(model), ""] if _doc_of(model) else [f"### {title}", ""]
        )
        lines += ["| key | type | default | description |", "|---|---|---|---|", *rows, ""]
    for sub, key, sub_title in nested:
        lines += _section_tables(sub, key, sub_title)
    return lines


def params_reference_markdown() -> str:
    """The params reference (docs/params.md), rendered from the schema: one table per section."""
    lines = [_GENERATED_NOTE, "", *_section_tables(Params, "", "top level")]
    return "\n".join(lines).rstrip("\n") + "\n"


def with_params_reference(readme: str) -> str:
    """`readme` with the text between the params markers replaced by the generated reference."""
    begin, end = readme.find(PARAMS_DOC_BEGIN), readme.find(PARAMS_DOC_END)
    if begin < 0 or end < begin:
        raise ValueError(
            f"the page has no '{PARAMS_DOC_BEGIN}' ... '{PARAMS_DOC_END}' markers (in that order)"
        )
    head = readme[: begin + len(PARAMS_DOC_BEGIN)]
    return f"{head}\n{params_reference_markdown()}\n{readme[end:]}"


def first_difference(current: str, wanted: str) -> str | None:
    """`line N: ...` for the first line where `current` differs from `wanted`; None if equal."""
    if current == wanted:
        return None
    old, new = current.splitlines(), wanted.splitlines()
    for i in range(max(len(old), len(new))):
        got = old[i] if i < len(old) else "<end of file>"
        want = new[i] if i < len(new) else "<end of file>"
        if got != want:
            return f"line {i + 1}: has {got!r}, expected {want!r}"
    return "line endings differ"
