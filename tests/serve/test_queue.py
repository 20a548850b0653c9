"""A full queue: the real server with room for one waiting request answers the rest 429, and
every request it accepted is answered; a 429 says when to retry (Retry-After)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import yaml
from conftest import tiny_params
from openai import OpenAI

from orchestry.params import load_params
from orchestry.serve.launch import server_process
from orchestry.stages.from_params import make_policy

pytestmark = pytest.mark.slow  # a real model generates here


def test_a_full_queue_answers_429_and_loses_nothing(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    make_policy(load_params(params)).save_adapters(tmp_path / "adapters")
    flags = ["--max-queue", "1", "--max-batch", "1", "--batch-wait-ms", "0"]
    with server_process(
        params, tmp_path / "adapters", flags, tmp_path / "server.log", torch_threads=1
    ) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)

        def ask(i: int) -> str:
            try:
                client.chat.completions.create(
                    model="main", messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=8
                )
            except openai.RateLimitError as err:
                assert "requests are waiting (--max-queue)" in str(err)
                assert int(err.response.headers["retry-after"]) >= 1  # issue 58, finding 6
                return "refused"
            return "answered"

        with ThreadPoolExecutor(12) as pool:
            outcomes = list(pool.map(ask, range(12)))
    assert outcomes.count("refused") >= 1, outcomes
    assert outcomes.count("answered") >= 1, outcomes
    assert len(outcomes) == 12  # every request got one or the other: none lost
