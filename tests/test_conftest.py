"""The test helpers' own promises (tests/conftest.py): the model loads in float32 unless a test asks."""

from dataclasses import replace

import pytest
from conftest import TEST_DTYPE, cpu_params, model_spec, tiny_params

from orchestry.agents.lora.base_model import load_base_model


def test_the_helpers_load_the_weights_in_the_test_dtype_and_keep_the_rest() -> None:
    assert TEST_DTYPE == "float32"
    params = cpu_params({"model": {"agents": ["aux1", "aux2", "main"]}, "train": {"group_size": 2}})
    assert params.model.dtype == TEST_DTYPE and params.model.agents == ["aux1", "aux2", "main"]
    assert params.train.group_size == 2 and cpu_params().model.dtype == TEST_DTYPE
    assert model_spec().dtype == TEST_DTYPE and model_spec(dtype="bfloat16").dtype == "bfloat16"
    assert tiny_params()["model"]["dtype"] == TEST_DTYPE


def test_an_unasked_bfloat16_load_on_the_cpu_fails_before_the_weights_load() -> None:
    with pytest.raises(AssertionError, match="mark it pytest.mark.bfloat16"):
        load_base_model(replace(model_spec(), dtype="bfloat16", device="cpu"))
