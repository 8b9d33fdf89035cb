"""`experiments.benchmarks.family`: a preset's sweep on every task of a family, scored over it."""

import json
import os

import numpy as np
import pytest

from anakin import AnakinConfig
from experiments.benchmarks import family
from experiments.benchmarks.published import TASK_SCALES, task_scale
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig, PopulationConfig, to_dict

pytest.importorskip("rliable.metrics")

RATES = (1e-3, 1e-2)


def fake_task_run(out, env_id, returns):
    """`out/runs/<env_id>` as a population run of two learning rates x two seeds would leave
    it: one metrics row per entry of `returns [rows, 4 members]` (setting-major)."""
    run_dir = family.task_dir(str(out), env_id)
    os.makedirs(run_dir)
    config = Config(
        env=EnvConfig(env_id),
        agent=PPOConfig(),
        arch=AnakinConfig(num_seeds=2),
        population=PopulationConfig(sweep=("agent.learning_rate=1e-3,1e-2",)),
    )
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(to_dict(config), f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for i, row in enumerate(returns):
            members = [
                {
                    "member": m,
                    "setting": m // 2,
                    "seed": m % 2,
                    "hypers": {"learning_rate": RATES[m // 2]},
                    "episode_return": r,
                }
                for m, r in enumerate(row)
            ]
            f.write(
                json.dumps(
                    {
                        "env_steps": 1000 * (i + 1),
                        "episode_return": float(np.mean(row)),
                        "episode_return_per_seed": list(row),
                        "members": members,
                    }
                )
                + "\n"
            )


def test_classic_control_is_scaled_from_a_random_policy_to_the_solved_threshold():
    cartpole, acrobot = TASK_SCALES["CartPole-v1"], TASK_SCALES["Acrobot-v1"]
    assert (cartpole.random, cartpole.reference) == (21.9, 475.0) and acrobot.reference == -100.0
    assert task_scale("ppo", "CartPole-v1", 500_000) == cartpole
    # Where an algorithm has a published return, it is the reference and return 0 scores 0.
    minatar = task_scale("ppo", "Breakout-MinAtar", 1_300_000)
    assert (minatar.random, minatar.reference) == (0.0, 15.7)
    assert task_scale("ppo", "Catch", 1000) is None


def test_report_over_two_tasks_normalises_each_and_pools_settings(tmp_path):
    # Two rows; the tail (the last half) scores only the second.
    fake_task_run(tmp_path, "CartPole-v1", [[0, 0, 0, 0], [475.0, 248.45, 21.9, 21.9]])
    fake_task_run(tmp_path, "Acrobot-v1", [[0, 0, 0, 0], [-100.0, -100.0, -299.6, -499.2]])
    result = family.family_report(str(tmp_path), "ppo-cartpole-anakin", tail=0.5, reps=20)
    assert result["tasks"] == ["Acrobot-v1", "CartPole-v1"] and result["normalised"]
    assert result["random"] == {"Acrobot-v1": -499.2, "CartPole-v1": 21.9}
    good, bad = "ppo-cartpole-anakin learning_rate=0.001", "ppo-cartpole-anakin learning_rate=0.01"
    # (return - random) / (solved - random), by hand: CartPole (248.45 - 21.9) / 453.1 = 0.5,
    # Acrobot (-299.6 + 499.2) / 399.2 = 0.5.
    np.testing.assert_allclose(result["scores"][good], [[1.0, 1.0], [1.0, 0.5]])
    np.testing.assert_allclose(result["scores"][bad], [[0.5, 0.0], [0.0, 0.0]], atol=1e-12)
    assert result["raw"][good] == {"Acrobot-v1": [-100.0, -100.0], "CartPole-v1": [475.0, 248.45]}
    assert result["settings"][good]["runs"] == 2
    assert result["settings"][good]["mean"]["value"] == pytest.approx(0.875)
    text = family.markdown(result)
    rows = [line for line in text.splitlines() if line.startswith("| ppo-cartpole-anakin")]
    assert rows[0].startswith(f"| {good} | -100.0 ± 0.0 (1.00 ± 0.00) | 361.7 ± 113.3 (0.75 ± 0.25) |")
    assert "CartPole-v1 21.9 -> 475" in text


def test_main_reports_runs_already_trained(tmp_path, capsys):
    fake_task_run(tmp_path, "MountainCar-v0", [[-200.0, -200.0, -110.0, -155.0]])
    fake_task_run(tmp_path, "CartPole-v1", [[21.9, 21.9, 475.0, 475.0]])
    result = family.main(["ppo-cartpole-anakin", "--report-only", "--reps", "20", "--out", str(tmp_path)])
    assert result["family"] == "classic-control" and "IQM over the family" in capsys.readouterr().out
    with open(tmp_path / "family.json") as f:
        assert json.load(f)["raw"]["ppo-cartpole-anakin learning_rate=0.01"]["MountainCar-v0"] == [-110.0, -155.0]
    assert os.path.getsize(tmp_path / "family.md") > 0


def test_each_preset_is_held_out_on_its_family_with_its_observation():
    assert family.family_of("ppo-cartpole-anakin") == "classic-control"
    assert family.family_of("ppo-lstm-masked-cartpole-anakin") == "classic-control-masked"
    assert family.family_of("sac-pendulum-anakin") == "classic-control-continuous"
    command = family.train_command(
        "ppo-lstm-masked-cartpole-anakin", "MountainCar-v0", (0,), "out", 2, 1000, ["agent.learning-rate=1e-3,3e-3"]
    )
    assert (
        command[command.index("--env.observe") + 1] == "0" and command[command.index("--total-env-steps") + 1] == "1000"
    )
    assert command[-2:] == ["--sweep", "agent.learning-rate=1e-3,3e-3"] and "--env.observe" not in family.train_command(
        "dqn-cartpole-anakin", "Acrobot-v1", (), "out", 2, None, []
    )
