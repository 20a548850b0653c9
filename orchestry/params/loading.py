"""Reading params.yaml, validated once at the boundary.

Every stage reads its own section through `load_params`. A bad file (unknown key, wrong type, value out
of range) raises `ParamsError` with one line naming the key path and what is allowed; the CLI turns it
into exit code 2 before any stage writes anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestry.params.schema import Params


class ParamsError(ValueError):
    """A params file that does not match the schema; the message is one line."""


def _allowed(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model is not None else ""


def _section_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the key at `loc` (for listing allowed keys)."""
    model: type[BaseModel] | None = Params
    for part in loc[:-1]:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return model


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        owner = _section_at(loc)
        allowed = f"; allowed keys: {_allowed(owner)}" if owner is not None else ""
        return f"{source}: unknown key '{path}'{allowed}"
    got = first.get("input")
    shown = "" if isinstance(got, dict) else f" (got {got!r})"
    more = f" [+{len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"{source}: {path}: {first['msg']}{shown}{more}"


def parse_params(data: Any, source: str = "params.yaml") -> Params:
    """Validate a loaded params mapping; raise ParamsError with one line on any problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: the top level must be a mapping of sections")
    try:
        return Params.model_validate(data)
    except ValidationError as err:
        raise ParamsError(_one_line(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such params file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse_params(data, str(path))
