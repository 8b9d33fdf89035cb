"""Lifecycles exercised repeatedly: a run stopped and resumed several times, its budget
raised between sessions, ends as the same run uninterrupted (Anakin: metrics rows,
parameters, replay buffers, keys and environments exactly; Sebulba: what its resume
promises, the learner, its counters, its replay buffers and the metrics rows continued)."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from anakin import AnakinConfig
from experiments import train as train_lib
from podracer.agents import DQNConfig, PPOConfig
from podracer.checkpoint import Checkpointer, checkpoint_dir
from podracer.config import CheckpointConfig, Config, EnvConfig, LogConfig, PopulationConfig
from sebulba import SebulbaConfig
from tests.helpers import assert_trees_equal, comparable, read_rows
from tests.test_lifecycle import StopAfter

QUIET = LogConfig(console=False, tensorboard=False)
# Catch on the 4 test devices: 8 envs x 16 steps an update, 2 updates per host call (a
# metrics row per call). Annealing off: a run whose budget is raised between sessions
# then follows the same learning rates as the run given the larger budget from the start.
PPO_SWEEP = Config(
    env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2, anneal_lr=False, hidden_sizes=(16,)),
    arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=2, num_seeds=2),
    total_env_steps=8 * 16 * 12, log=QUIET, checkpoint=CheckpointConfig(every_updates=4, keep=2),
    population=PopulationConfig(sweep=("agent.learning_rate=1e-3,3e-3",)),
)
# DQN on Catch with a buffer of 40 transitions per device that wraps around (8 an update on
# each device), n-step returns and gradient steps from the first update on.
DQN_REPLAY = Config(
    env=EnvConfig("Catch"),
    agent=DQNConfig(buffer_size=40, batch_size=8, gradient_steps=2, learning_starts=0, n_step=2, hidden_sizes=(16,)),
    arch=AnakinConfig(num_envs=8, rollout_length=4, updates_per_call=2, num_seeds=2),
    total_env_steps=8 * 4 * 12, log=QUIET, checkpoint=CheckpointConfig(every_updates=4, keep=2),
)


def set_budget(run_dir, total_env_steps: int) -> None:
    """Raise the budget in a run's config.json (what `Train a run longer` asks a user to do)."""
    saved = json.loads((run_dir / "config.json").read_text())
    saved["total_env_steps"] = total_env_steps
    (run_dir / "config.json").write_text(json.dumps(saved))


def assert_rows_match_checkpoint(run_dir) -> None:
    """metrics.jsonl holds exactly the rows the latest checkpoint counts, none twice."""
    rows = read_rows(run_dir)
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        assert checkpoints.progress().rows == len(rows)
    steps = [row["env_steps"] for row in rows]
    assert steps == sorted(set(steps))


def interrupted_anakin_run(config: Config, run_dir, first_budget: int):
    """`config` run in four sessions: to `first_budget` (finished), then with the budget
    raised to `config.total_env_steps` stopped after 2 host calls, resumed and stopped
    after 1, resumed to the end. Returns each session's result."""
    first = train_lib.train(dataclasses.replace(config, run_dir=str(run_dir), total_env_steps=first_budget))
    assert not first.stopped and first.env_steps == first_budget
    assert_rows_match_checkpoint(run_dir)
    set_budget(run_dir, config.total_env_steps)
    second = train_lib.resume(str(run_dir), should_stop=StopAfter(1))
    assert_rows_match_checkpoint(run_dir)
    third = train_lib.resume(str(run_dir), should_stop=StopAfter(0))
    assert_rows_match_checkpoint(run_dir)
    last = train_lib.resume(str(run_dir))
    assert_rows_match_checkpoint(run_dir)
    sessions = [first, second, third, last]
    assert [s.stopped for s in sessions] == [False, True, True, False]
    ends = [s.env_steps for s in sessions]
    assert ends == sorted(set(ends)) and ends[-1] == config.total_env_steps, ends  # each session went on
    # Each session's own rows are the rows it appended, from where the last one stopped.
    assert sum(len(s.metrics) for s in sessions) == len(read_rows(run_dir))
    return sessions


@pytest.mark.timeout(300)
def test_a_sweep_population_resumed_three_times_across_a_larger_budget_is_exact(tmp_path):
    """A sweep of 2 learning rates x 2 seeds, trained to 4 updates, then raised to 12
    updates and stopped twice on the way: the same parameters, optimizer states, keys,
    environments and hyperparameters as the run of 12 updates uninterrupted, and the same
    metrics rows (members included) but for their timings."""
    full = train_lib.train(dataclasses.replace(PPO_SWEEP, run_dir=str(tmp_path / "full")))
    sessions = interrupted_anakin_run(PPO_SWEEP, tmp_path / "run", first_budget=8 * 16 * 4)
    assert_trees_equal(sessions[-1].state, full.state)
    rows = read_rows(tmp_path / "run")
    assert comparable(rows) == comparable(read_rows(tmp_path / "full")) == comparable(full.metrics)
    assert len(rows[-1]["members"]) == 4
    wall = [row["wall_s"] for row in rows]
    assert wall == sorted(wall)  # wall time continues over the sessions


@pytest.mark.timeout(300)
def test_dqn_resumed_three_times_across_a_larger_budget_keeps_its_replay_buffers_exactly(tmp_path):
    """DQN with per-device buffers that wrap around, n-step returns and 2 seeds: resumed
    three times (once to a larger budget), the buffers (every slot, the insert position,
    the stream ends), the online and target parameters, the optimizer and the counters are
    those of the uninterrupted run, and so are the metrics rows."""
    full = train_lib.train(dataclasses.replace(DQN_REPLAY, run_dir=str(tmp_path / "full")))
    sessions = interrupted_anakin_run(DQN_REPLAY, tmp_path / "run", first_budget=8 * 4 * 4)
    last = sessions[-1]
    # The buffers wrapped around: 12 updates of 8 transitions per device into 40 slots.
    buffers = full.state.agent.local
    assert np.asarray(buffers.is_full).all() and (np.asarray(buffers.current_index) == 96 % 40).all()
    assert_trees_equal(last.state.agent.local, full.state.agent.local)
    assert_trees_equal(last.state, full.state)
    assert comparable(read_rows(tmp_path / "run")) == comparable(full.metrics)
    assert all(row["gradient_steps"] > 0 for row in full.metrics)
