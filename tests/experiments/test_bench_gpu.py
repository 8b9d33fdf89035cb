"""`podracer bench gpu --smoke`: every part of the GPU benchmark runs end to end on CPU, each
in its own process, and the records land in one JSON file."""

import json

import pytest

from tests.support.helpers import run_main


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_gpu_smoke_runs_every_part(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    code, captured = run_main(capsys, "bench", "gpu", "--smoke", "--out", out)
    assert code == 0, captured.err
    report = json.loads(out.read_text())
    assert report["smoke"] is True
    records = {record["part"]: record for record in report["parts"]}
    assert list(records) == ["anakin-minatar", "anakin-cartpole", "brax", "sebulba-pong", "sebulba-pong-curve"]
    for name, record in records.items():
        assert record["status"] in ("ok", "skipped"), (name, record.get("stderr_tail"))
    for name in ("anakin-minatar", "anakin-cartpole"):
        assert records[name]["sps"] > 0 and records[name]["reference_sps"] > 0
    assert records["brax"]["status"] == "ok" or "brax" in records["brax"]["reason"]
    pong = records["sebulba-pong"]
    assert pong["env_limit_sps"] > 0 and pong["actor_over_envpool"] > 0 and pong["layout"]["reason"]
    assert records["sebulba-pong-curve"]["rows"]


def test_bench_gpu_needs_out(capsys):
    code, captured = run_main(capsys, "bench", "gpu", "--smoke")
    assert code == 2 and "bench gpu needs --out FILE" in captured.err


def test_smoke_applies_to_bench_gpu_only(capsys):
    code, captured = run_main(capsys, "bench", "sebulba", "--smoke")
    assert code == 2 and "--smoke applies to bench gpu" in captured.err
