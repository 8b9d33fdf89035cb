"""`podracer report`: rliable's estimators over seeds, members and tasks."""

import json
import os

import numpy as np
import pytest

from anakin import AnakinConfig
from experiments.report import markdown, report, stratified_bootstrap, write_report
from podracer.agents import PPOConfig
from podracer.config import Config, ConfigError, EnvConfig, PopulationConfig, to_dict

pytest.importorskip("rliable.metrics")


def fake_run(root, name, env_id, returns, hypers=None):
    """A run directory with a config and one metrics row per entry of `returns [rows, members]`."""
    run_dir = os.path.join(root, name)
    os.makedirs(run_dir)
    sweep = ("agent.learning_rate=1e-3,1e-2",) if hypers else ()
    config = Config(env=EnvConfig(env_id), agent=PPOConfig(), arch=AnakinConfig(num_seeds=len(returns[0])),
                    population=PopulationConfig(sweep=sweep))
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(to_dict(config), f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for i, row in enumerate(returns):
            out = {"env_steps": 1_300_000 * (i + 1) // len(returns), "sps": 1.0, "wall_s": float(i),
                   "episode_return": float(np.mean(row)), "episode_return_per_seed": list(row)}
            if hypers:
                out["members"] = [{"member": m, "hypers": hypers[m], "episode_return": r} for m, r in enumerate(row)]
            f.write(json.dumps(out) + "\n")
    return run_dir


def test_bootstrap_interval_covers_the_point_and_is_reproducible():
    scores = np.random.default_rng(0).normal(size=(10, 3))
    point, interval = stratified_bootstrap(lambda s: s.mean(), [scores], 500, 0)
    again = stratified_bootstrap(lambda s: s.mean(), [scores], 500, 0)
    assert interval[0] < point < interval[1]
    np.testing.assert_array_equal(interval, again[1])


def test_members_are_grouped_by_setting_and_pooled_over_tasks(tmp_path):
    hypers = [{"learning_rate": 1e-3}] * 3 + [{"learning_rate": 1e-2}] * 3
    a = fake_run(tmp_path, "a", "Breakout-MinAtar", [[1, 2, 3, 10, 11, 12], [15.7, 15.7, 15.7, 31.4, 31.4, 31.4]],
                 hypers)
    b = fake_run(tmp_path, "b", "Asterix-MinAtar", [[2.1, 2.1, 2.1, 4.2, 4.2, 4.2]], hypers)
    result = report([a, b], labels=["pop", "pop"], tail=0.5, reps=200)
    assert result["tasks"] == ["Asterix-MinAtar", "Breakout-MinAtar"] and result["normalised"]
    low, high = result["settings"]["pop learning_rate=0.001"], result["settings"]["pop learning_rate=0.01"]
    assert low["runs"] == high["runs"] == 3
    # Normalised by gymnax-blines' PPO at 1.3M steps: the reference scores 1, twice it 2.
    assert low["iqm"]["value"] == pytest.approx(1.0) and high["iqm"]["value"] == pytest.approx(2.0)
    assert low["optimality_gap"]["value"] == pytest.approx(0.0) and result["optimality_threshold"] == 1.0
    (p,) = result["probability_of_improvement"]
    assert {p["x"], p["y"]} == {"pop learning_rate=0.001", "pop learning_rate=0.01"}
    assert p["probability"] in (0.0, 1.0)
    profile = result["performance_profiles"]
    assert len(profile["tau"]) == len(profile["pop learning_rate=0.01"]) and profile["pop learning_rate=0.01"][0] == 1.0
    text = markdown(result)
    assert "| pop learning_rate=0.01 | 3 | 2 [2, 2]" in text
    pooled = report([a, b], labels=["pop", "pop"], tail=0.5, reps=200, by="run")
    assert list(pooled["settings"]) == ["pop"] and pooled["settings"]["pop"]["runs"] == 6
    paths = write_report(result, str(tmp_path / "out"))
    assert all(os.path.getsize(path) > 0 for path in paths) and len(paths) == 4


def test_by_best_or_median_scores_each_run_directory_once_by_its_members(tmp_path):
    hypers = [{"learning_rate": 1e-3}] * 2 + [{"learning_rate": 1e-2}] * 2
    # Two experiments (seeds of the whole population) on Catch, raw returns; the last half of rows scores.
    one = fake_run(tmp_path, "one", "Catch", [[9, 9, 9, 9], [0.1, 0.4, 0.2, float("nan")]], hypers)
    two = fake_run(tmp_path, "two", "Catch", [[9, 9, 9, 9], [0.3, 0.5, 0.9, 0.7]], hypers)
    best = report([one, two], labels=["pop", "pop"], tail=0.5, reps=200, by="best")
    assert list(best["settings"]) == ["pop"] and best["settings"]["pop"]["runs"] == 2
    assert best["scores"]["pop"] == [[0.4], [0.9]]  # a member with no finished episode is left out
    median = report([one, two], labels=["pop", "pop"], tail=0.5, reps=200, by="median")
    assert median["scores"]["pop"] == [[0.2], [pytest.approx(0.6)]]
    assert median["settings"]["pop"]["mean"]["value"] == pytest.approx(0.4)
    # A run without a population: its seeds are its members.
    seeds = fake_run(tmp_path, "seeds", "Catch", [[0.5, 1.0, 0.0]])
    assert report([seeds], ["seeds"], tail=1.0, reps=200, by="best")["scores"]["seeds"] == [[1.0]]
    with pytest.raises(ConfigError, match="--by must be one of setting, run, best, median"):
        report([seeds], by="worst")


def test_runs_without_a_sweep_are_settings_by_label_and_raw_returns_without_references(tmp_path):
    a = fake_run(tmp_path, "x", "Catch", [[0.5, 1.0, 0.0, 1.0]])
    b = fake_run(tmp_path, "y", "Catch", [[0.0, 0.0, 0.5, 0.5]])
    result = report([a, b], labels=["x", "y"], tail=1.0, reps=200, compare=["x", "y"])
    assert not result["normalised"] and result["settings"]["x"]["optimality_gap"] is None
    assert result["settings"]["x"]["mean"]["value"] == pytest.approx(0.625)
    assert result["probability_of_improvement"][0]["probability"] == pytest.approx(
        np.mean([[1.0 if u > v else 0.5 if u == v else 0.0 for v in (0, 0, .5, .5)] for u in (.5, 1, 0, 1)]))
    with pytest.raises(ConfigError, match="--compare takes two settings"):
        report([a, b], labels=["x", "y"], compare=["x", "z"])
