"""Every prefix-adder run writes the Pareto front it found into its run directory when it
ends (`experiments.prefix.run_front`): the designs its host environments costed and its
final policy's greedy designs, as `designs.jsonl`, Verilog per design on the front and
`front/front.csv` (area, delay, cost model, toolchain)."""

import csv
import os

import numpy as np
import pytest

from experiments.overrides import apply_overrides
from experiments.prefix.front import pareto_front, read_designs
from experiments.prefix.host_env import found_front
from experiments.presets import all_presets

TINY = ["--total-env-steps", "288", "--arch.num-envs", "12", "--agent.learning-starts", "64",
        "--agent.torso-options", "blocks=1", "channels=8", "--agent.unroll-sgd", "false",
        "--agent.epsilon-decay-steps", "128", "--log.console", "false"]


def _tiny_front_run(tmp_path, monkeypatch, env_id: str):
    from experiments.train import train

    monkeypatch.setenv("PODRACER_PREFIX_CACHE", str(tmp_path / "cache.jsonl"))
    run_dir = tmp_path / "run"
    config = apply_overrides(all_presets()["dqn-prefix16-front-sebulba"](),
                             ["--env.id", env_id, "--run-dir", str(run_dir), *TINY])
    result = train(config, console=False)
    assert result.env_steps >= 288
    return run_dir


def _check_front(run_dir, model_prefix: str) -> None:
    designs, model = read_designs(str(run_dir))
    assert model.startswith(model_prefix)
    with open(run_dir / "front" / "front.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) == {"verilog", "bits", "area", "delay", "cost_model", "toolchain"}
    points = np.array([[float(row["area"]), float(row["delay"])] for row in rows])
    assert len(pareto_front(points)) == len(rows)  # no row dominates another
    every = {(d.area, d.delay) for d in designs}
    front = {tuple(p) for p in np.array([[d.area, d.delay] for d in designs])[pareto_front(
        np.array([[d.area, d.delay] for d in designs]))]}
    assert {tuple(p) for p in points} == front and front <= every  # the front of everything recorded
    for row in rows:
        assert row["cost_model"] == model and row["toolchain"] and row["bits"] == "8"
        text = (run_dir / "front" / row["verilog"]).read_text()
        assert "module adder8_" in text
    assert found_front(8, model) == []  # the run took the designs its environments found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_front_restarting_run_writes_its_front_with_analytic_costs(tmp_path, monkeypatch):
    """The recommended front-restarting preset on 8-bit adders with analytic costs, 288 env
    steps: its directory holds the designs it found and their front as Verilog and a table."""
    run_dir = _tiny_front_run(tmp_path, monkeypatch, "PrefixAdder-8")
    _check_front(run_dir, "analytic-")
    designs, _ = read_designs(str(run_dir))
    greedy = 2 * 11 * (1 + 1)  # two starts x 11 weights, each with its one step (max_episode_steps=1)
    assert len(designs) > len({d.nodes.tobytes() for d in designs[:greedy]})  # the environments' designs too


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_synthesis_run_writes_its_front_with_the_toolchain(tmp_path, monkeypatch):
    """The same with synthesis rewards: the table names the toolchain, flow and library."""
    run_dir = _tiny_front_run(tmp_path, monkeypatch, "PrefixAdderSynth-8")
    _check_front(run_dir, "synthesis:")
    with open(run_dir / "front" / "front.csv") as f:
        row = next(csv.DictReader(f))
    assert "pyosys" in row["toolchain"] and ".lib" in row["toolchain"] and "sha256" in row["toolchain"]
    assert os.path.exists(tmp_path / "cache.jsonl")
