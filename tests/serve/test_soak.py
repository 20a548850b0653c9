"""A small soak (benchmarks/serve_soak.py, the one `serve_load.py` runs at 1,000 clients) against
the real server: 96 clients from 32 threads, a quarter of them bad (malformed JSON, wrong types,
an unknown model, an oversize body, a wrong key, a foreign Host, stalled bodies and heads) or
hanging up mid-request. No good request is lost, every bad one gets a 4xx, and good answers sent
again alone with their seeds are the same."""

from __future__ import annotations

import sys

import pytest
import yaml
from conftest import ROOT, tiny_params

from orchestry.params import load_params
from orchestry.serve.launch import running_server
from orchestry.stages.from_params import make_policy

sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_soak import Server, SoakSettings, soak  # noqa: E402

pytestmark = pytest.mark.slow  # ~150 generate calls

KEY = "soak-test-key"


def test_a_mixed_soak_loses_nothing_and_answers_bad_clients_4xx(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    make_policy(load_params(params)).save_adapters(tmp_path / "adapters")
    flags = ["--header-timeout-s", "2", "--body-timeout-s", "2", "--max-batch", "32"]
    env = {"ORCHESTRY_API_KEY": KEY}
    log = tmp_path / "server.log"
    with running_server(
        params, tmp_path / "adapters", flags, log, torch_threads=1, env=env
    ) as server:
        settings = SoakSettings(96, 32, max_tokens=2, check=8, warmup=8, timeout_s=300)
        record = soak(Server(server.url, server.pid, KEY, 1 << 20), settings)
    assert record["good"]["lost"] == 0 and record["good"]["failed"] == 0, record["good"]
    assert record["bad"]["other"] == 0, record["bad"]
    assert record["bad"]["wanted_status"] == record["bad"]["sent"], record["bad"]["by_kind"]
    assert record["bad_or_hanging_up_share"] >= 0.2 and record["hung_up"]["sent"] > 0
    assert record["hung_up"]["server_answers_after"]
    assert record["same_answer_alone"] == {"checked": 8, "identical": 8}
    assert "Traceback" not in log.read_text()
