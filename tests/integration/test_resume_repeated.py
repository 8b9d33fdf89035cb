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
from tests.experiments.test_train import StopAfter
from tests.support.helpers import assert_trees_equal, comparable, read_rows

QUIET = LogConfig(console=False, tensorboard=False)
# Catch on the 4 test devices: 8 envs x 16 steps an update, 2 updates per host call (a
# metrics row per call). Annealing off: a run whose budget is raised between sessions
# then follows the same learning rates as the run given the larger budget from the start.
PPO_SWEEP = Config(
    env=EnvConfig("Catch"),
    agent=PPOConfig(num_minibatches=2, anneal_lr=False, hidden_sizes=(16,)),
    arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=2, num_seeds=2),
    total_env_steps=8 * 16 * 12,
    log=QUIET,
    checkpoint=CheckpointConfig(every_updates=4, keep=2),
    population=PopulationConfig(sweep=("agent.learning_rate=1e-3,3e-3",)),
)
# DQN on Catch with a buffer of 40 transitions per device that wraps around (8 an update on
# each device), n-step returns and gradient steps from the first update on.
DQN_REPLAY = Config(
    env=EnvConfig("Catch"),
    agent=DQNConfig(buffer_size=40, batch_size=8, gradient_steps=2, learning_starts=0, n_step=2, hidden_sizes=(16,)),
    arch=AnakinConfig(num_envs=8, rollout_length=4, updates_per_call=2, num_seeds=2),
    total_env_steps=8 * 4 * 12,
    log=QUIET,
    checkpoint=CheckpointConfig(every_updates=4, keep=2),
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# Sebulba DQN on CartPole: 1 actor device, 3 learner devices with a buffer each (2 of the 6
# envs, 8 steps: 16 transitions an update per device, never wrapping around 512 slots), a
# row every 5 updates, a replay ratio whose fractional credit carries from update to update.
SEBULBA_DQN = Config(
    env=EnvConfig("CartPole-v1"),
    total_env_steps=48 * 20,
    log=QUIET,
    agent=DQNConfig(buffer_size=512, batch_size=16, replay_ratio=2.5, learning_starts=96, hidden_sizes=(16,)),
    arch=SebulbaConfig(
        num_envs=6, rollout_length=8, max_policy_lag=1, actor_devices=(0,), learner_devices=(1, 2, 3), updates_per_log=5
    ),
    checkpoint=CheckpointConfig(every_updates=4, keep=2),
)


def assert_streams_begin(steps, starts: list[int], held: int, envs: int, per_rollout: int) -> None:
    """In each learner device's buffer of `held` steps of `envs` environments, stored a
    rollout of `per_rollout` steps at a time, time-major (`steps`: `[devices, 1, capacity,
    ...]`), a stream begins (`first`) at every slot of `starts` (one per environment) and
    elsewhere only at a rollout's first step after a step that ended an episode (a rollout
    is compared with the step stored before it, not within)."""
    first = np.asarray(steps.first)[:, 0, :held]
    ended = (np.asarray(steps.terminated) | np.asarray(steps.truncated))[:, 0, :held]
    expected = np.zeros_like(first)
    expected[:, envs:] = ended[:, :-envs]
    expected[:, np.arange(held) % per_rollout >= envs] = False
    for start in starts:
        expected[:, start : start + envs] = True
    np.testing.assert_array_equal(first, expected)


def stop_after_rows(rows: int):
    """`(on_metrics, should_stop)`: stop once `rows` rows of this session have been written."""
    seen = []
    return seen.append, lambda: len(seen) >= rows


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sebulba_resumed_three_times_across_a_larger_budget_continues_its_learner_and_buffers(tmp_path):
    """What a Sebulba resume promises, three times over (once to a larger budget): the same
    learner goes on (update and gradient-step counters, replay credit: those of the run
    uninterrupted), its replay buffers keep every step stored before (bit for bit) and mark
    where each session's restarted environments begin a new stream, and metrics.jsonl holds
    every row once, those the checkpoint counts, with no update left out of a row."""
    full = train_lib.train(dataclasses.replace(SEBULBA_DQN, run_dir=str(tmp_path / "full")))
    run_dir = tmp_path / "run"
    sessions = [train_lib.train(dataclasses.replace(SEBULBA_DQN, run_dir=str(run_dir), total_env_steps=48 * 6))]
    set_budget(run_dir, SEBULBA_DQN.total_env_steps)
    for stop_rows in (1, 1, None):
        on_metrics, should_stop = stop_after_rows(stop_rows) if stop_rows else (None, None)
        sessions.append(train_lib.resume(str(run_dir), on_metrics=on_metrics, should_stop=should_stop))
        assert_rows_match_checkpoint(run_dir)
    assert [s.stopped for s in sessions] == [False, True, True, False]
    ends = [int(s.state.update_count) for s in sessions]
    assert ends == sorted(set(ends)) and ends[0] == 6 and ends[-1] == 20, ends  # each session went on

    last, per_update = sessions[-1].state, 8 * 2  # transitions per update and learner device
    assert sessions[-1].env_steps == full.env_steps == 960
    assert int(last.opt_state.gradient_steps) == int(full.state.opt_state.gradient_steps) == 47
    assert float(last.opt_state.replay_credit) == float(full.state.opt_state.replay_credit) == 0.5
    buffers = last.local.experience
    assert np.asarray(last.local.current_index).tolist() == np.asarray(full.state.local.current_index).tolist()
    for session in sessions[:-1]:  # what each session stored is still there, as it was stored
        held = int(session.state.update_count) * per_update
        assert_trees_equal(
            jax.tree.map(lambda x: np.asarray(x)[:, :, :held], buffers),
            jax.tree.map(lambda x: np.asarray(x)[:, :, :held], session.state.local.experience),
        )
    # A new stream begins where each session's environments started (2 envs per device each
    # time), and elsewhere only after a step that ended its episode (slots are time-major:
    # an environment's previous step is 2 slots back).
    starts = [int(s.state.update_count) * per_update for s in sessions[:-1]]
    assert_streams_begin(buffers, [0] + starts, held=20 * per_update, envs=2, per_rollout=per_update)
    assert_streams_begin(full.state.local.experience, [0], held=20 * per_update, envs=2, per_rollout=per_update)

    steps = [row["env_steps"] for row in read_rows(run_dir)]
    stops = [s.env_steps for s in sessions[:-1]]
    assert steps == sorted(set(steps)) and steps[-1] == 960
    assert set(steps) == {row["env_steps"] for row in full.metrics} | set(stops), (steps, stops)
    assert read_rows(run_dir)[-1].keys() == full.metrics[-1].keys()
