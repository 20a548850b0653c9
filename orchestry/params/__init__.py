"""Params: the typed schema of params.yaml (the only home of defaults) and its loading."""

from orchestry.params.env_schema import SetSplit
from orchestry.params.loading import ParamsError, load_params, parse_params
from orchestry.params.schema import BASELINE_NAMES, Params

__all__ = ["BASELINE_NAMES", "Params", "ParamsError", "SetSplit", "load_params", "parse_params"]
