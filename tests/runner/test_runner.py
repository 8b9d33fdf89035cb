"""The layer both runners share (`podracer.runner`): one metrics-row builder, one NaN guard,
one `EpisodeStats`, one set of per-device state helpers, and a run that sets up once."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import anakin.runner
import sebulba.metrics
import sebulba.runner
from anakin import AnakinConfig
from experiments import train as train_lib
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig, LogConfig
from podracer.runner import SHARED_KEYS, EpisodeStats, NonFiniteError, all_finite, check_finite, check_row
from podracer.runner import metrics as metrics_lib
from podracer.runner.device_state import (
    add_device_axis,
    agent_state_specs,
    broadcast_device_axis,
    strip_device_axis,
)
from podracer.types import AgentState
from sebulba import SebulbaConfig

pytestmark = pytest.mark.timeout(120)

QUIET = LogConfig(console=False, tensorboard=False)
# 4 updates of each, a row every 2.
ANAKIN = Config(
    env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2, num_epochs=1, hidden_sizes=(16,)),
    arch=AnakinConfig(num_envs=8, rollout_length=16, num_seeds=2, updates_per_call=2),
    total_env_steps=8 * 16 * 4, log=QUIET,
)
SEBULBA = Config(
    env=EnvConfig("CartPole-v1"), agent=PPOConfig(num_minibatches=2, num_epochs=1, hidden_sizes=(16,)),
    arch=SebulbaConfig(num_envs=4, rollout_length=16, actor_devices=(0,), learner_devices=(1, 2), updates_per_log=2),
    total_env_steps=4 * 16 * 4, log=QUIET,
)


def counting(monkeypatch, module, name):
    """Wrap `module.name` so that calls to it are counted (and what it returned is kept)."""
    calls = []
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("config, runner, builder_module", [
    (ANAKIN, anakin.runner, anakin.runner), (SEBULBA, sebulba.runner, sebulba.metrics),
], ids=["anakin", "sebulba"])
def test_a_run_sets_up_once_and_writes_rows_from_the_one_builder(tmp_path, monkeypatch, config, runner,
                                                                  builder_module):
    """`experiments.train` runs the runner's `setup` once (its checks on every process) and
    the runner trains with it; every row written comes from `metrics_row` and carries the
    shared keys with their documented types."""
    assert builder_module.metrics_row is metrics_lib.metrics_row  # the one builder, not a copy
    setups = counting(monkeypatch, runner, "setup")
    built = counting(monkeypatch, builder_module, "metrics_row")
    result = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "run")), console=False)
    assert len(setups) == 1
    written = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(result.metrics) == len(written) == 2
    assert all(any(row is b for b in built) for row in result.metrics)
    for row, on_disk in zip(result.metrics, written):
        check_row(row)
        check_row(on_disk)  # JSON keeps the types: ints stay ints, None stays null
        assert list(row)[:len(SHARED_KEYS)] == list(SHARED_KEYS)
        assert row["env_steps"] in (2 * config.arch.num_envs * 16, 4 * config.arch.num_envs * 16)
        assert row["episodes"] > 0 and isinstance(row["episode_return"], float)
    if config is ANAKIN:
        assert all(len(row["episode_return_per_seed"]) == 2 for row in result.metrics)
    else:
        assert all({"learner_update_s", "policy_lag"} <= set(row) for row in result.metrics)


def test_metrics_row_means_and_types():
    per_seed = EpisodeStats(np.array([6.0, 0.0, 3.0], np.float32), np.array([9.0, 0.0, 4.0], np.float32),
                            np.array([3, 0, 1], np.int32))
    row = metrics_lib.metrics_row(np.int64(4096), np.float32(10.0), 2.5, per_seed, {"loss": np.float32(0.5)},
                                  queue_depth=1.0)
    check_row(row)
    assert row["episode_return"] == 2.5  # the mean of the seeds' means (2 and 3), seed 1 ended none
    assert row["episode_length"] == 3.5 and row["episodes"] == 4
    assert row["episode_return_per_seed"] == [2.0, None, 3.0]
    assert row["loss"] == 0.5 and type(row["loss"]) is float and row["queue_depth"] == 1.0
    host = EpisodeStats.host_zeros() + EpisodeStats.from_array(np.array([5.0, 7.0, 2.0]))
    row = metrics_lib.metrics_row(8, 1.0, 1.0, host, {})
    assert (row["episode_return"], row["episode_length"], row["episodes"]) == (2.5, 3.5, 2)
    assert "episode_return_per_seed" not in row
    none = metrics_lib.metrics_row(8, 1.0, 1.0, EpisodeStats.host_zeros(), {})
    assert none["episode_return"] is None and none["episode_length"] is None and none["episodes"] == 0
    check_row(none)
    with pytest.raises(ValueError, match="'episodes' is already a key"):
        metrics_lib.metrics_row(8, 1.0, 1.0, host, {}, episodes=3)
    with pytest.raises(ValueError, match="'sps' is already a key"):
        metrics_lib.metrics_row(8, 1.0, 1.0, host, {"sps": 1.0})
    with pytest.raises(ValueError, match="no 'wall_s'"):
        check_row({k: v for k, v in none.items() if k != "wall_s"})
    with pytest.raises(ValueError, match="'env_steps' is float, not int"):
        check_row({**none, "env_steps": 8.0})


def test_episode_stats_agree_in_jax_and_on_the_host():
    done = np.array([True, False, True, False])
    returns = np.array([1.5, 9.0, -2.0, 4.0], np.float32)
    lengths = np.array([3, 7, 5, 2], np.int32)
    in_jax = jax.jit(EpisodeStats.ended)(done, returns, lengths)
    on_host = EpisodeStats.host_ended(done, returns, lengths)
    np.testing.assert_array_equal(np.asarray(in_jax, np.float64), on_host.to_array())
    np.testing.assert_array_equal(on_host.to_array(), [-0.5, 8.0, 2.0])
    assert EpisodeStats.host_ended(np.zeros(4, bool), returns, lengths) == EpisodeStats.host_zeros()
    total = on_host + EpisodeStats.from_array(on_host.to_array())
    np.testing.assert_array_equal(total.to_array(), [-1.0, 16.0, 4.0])


def test_the_guard_names_metrics_parameters_and_seeds():
    check_finite({"loss": np.float32(1.0)}, True, "at update 3", "run stopped", "kept")  # all finite
    with pytest.raises(NonFiniteError, match=r"^non-finite loss metrics b, c at update 3; run stopped, kept$"):
        check_finite({"a": 1.0, "b": np.nan, "c": np.array([np.inf, 0.0])}, True, "at update 3", "run stopped", "kept")
    with pytest.raises(NonFiniteError, match=r"^non-finite parameters at update 3; stop, kept$"):
        check_finite({"a": 1.0}, np.bool_(False), "at update 3", "stop", "kept")
    # Per seed `[S]`: the seeds that went wrong, by their metrics or their parameters.
    with pytest.raises(NonFiniteError,
                       match=r"^non-finite loss metrics a and parameters in updates 5-8 \(seed 1, 2\); x, kept$"):
        check_finite({"a": np.array([0.0, np.nan, 0.0])}, np.array([True, True, False]), "in updates 5-8", "x", "kept")

    params = {"w": jnp.ones((3, 2, 2)), "b": jnp.zeros((3, 4)), "count": jnp.zeros((3,), jnp.int32)}
    assert bool(all_finite(params))
    broken = {**params, "w": params["w"].at[1, 0, 1].set(jnp.nan)}
    assert not bool(all_finite(broken))
    np.testing.assert_array_equal(all_finite(broken, batch_dims=1), [True, False, True])


def test_device_state_helpers():
    """Per-device state `local` is split over the device axis (after the seed axes) and
    everything else replicated; the axis is stripped for the agent and added back."""
    state = AgentState(params={"w": jnp.zeros((2,))}, opt_state=(), local={"buffer": jnp.zeros((2, 4, 3))},
                       update_count=jnp.zeros((), jnp.int32))
    specs = agent_state_specs(state, "d")
    assert specs.params["w"] == P() and specs.update_count == P() and specs.local["buffer"] == P("d")
    assert agent_state_specs(state, "d", seed_axes=1).local["buffer"] == P(None, "d")
    x = {"buffer": jnp.arange(24.0).reshape(2, 1, 4, 3)}  # [S, D=1, ...]
    stripped = strip_device_axis(x, seed_axes=1)
    assert stripped["buffer"].shape == (2, 4, 3)
    np.testing.assert_array_equal(add_device_axis(stripped, seed_axes=1)["buffer"], x["buffer"])
    assert strip_device_axis({"b": jnp.zeros((1, 5))})["b"].shape == (5,)
    host = broadcast_device_axis({"b": np.arange(6.0).reshape(2, 3)}, 4, seed_axes=1)["b"]
    assert host.shape == (2, 4, 3) and host.strides[1] == 0  # a view: no copy per device
    np.testing.assert_array_equal(host[:, 3], np.arange(6.0).reshape(2, 3))
    traced = jax.jit(lambda t: broadcast_device_axis(t, 4))({"b": jnp.ones((5,))})["b"]
    assert traced.shape == (4, 5)


def _tensorboard_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """`{tag: [(step, value), ...]}` from the TensorBoard event files in `logdir`."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.glob("events.*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (size,) = struct.unpack("<Q", data[i:i + 8])
            event = event_pb2.Event.FromString(data[i + 12:i + 12 + size])
            i += 12 + size + 4
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                # TensorBoard's rule: a restart at step S drops what came before at steps >= S.
                scalars = {tag: [p for p in points if p[0] < event.step] for tag, points in scalars.items()}
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_carries_the_rows_numbers_and_each_seeds_return(tmp_path):
    """README: `tensorboard/` holds the same as metrics.jsonl, so a multi-seed run's
    `episode_return_per_seed` too (one scalar per seed; a seed without episodes: none)."""
    from podracer.logging import TensorBoardSink

    sink = TensorBoardSink(str(tmp_path))
    sink.write({"env_steps": 512, "sps": 10.0, "wall_s": 1.0, "episode_return": 3.0, "episode_length": 3.0,
                "episodes": 2, "episode_return_per_seed": [2.0, None, 4.0], "loss": 0.5, "learning": True})
    sink.close()
    scalars = _tensorboard_scalars(tmp_path)
    assert scalars["episode_return"] == [(512, 3.0)] and scalars["episodes"] == [(512, 2.0)]
    assert scalars["episode_return_per_seed/0"] == [(512, 2.0)]
    assert scalars["episode_return_per_seed/2"] == [(512, 4.0)]
    assert "episode_return_per_seed/1" not in scalars and "env_steps" not in scalars and "learning" not in scalars


def test_tensorboard_of_a_resumed_run_shows_each_row_once(tmp_path, monkeypatch):
    """A run resumed from its checkpoint writes again the rows after it; TensorBoard then
    drops the first attempt's (`purge_step`: the checkpoint's env steps + 1), as
    metrics.jsonl is cut back, so no step appears twice; a new run drops everything."""
    import time

    from experiments import presets
    from experiments import train as train_lib
    from podracer.checkpoint import Progress
    from podracer.logging import TensorBoardSink

    first = TensorBoardSink(str(tmp_path), purge_step=0)
    for step in (100, 200, 300):  # the checkpoint was at 200; the run died after the row at 300
        first.write({"env_steps": step, "loss": float(step)})
    first.close()
    time.sleep(1.1)  # event files are named by the second they were opened in
    made = []
    monkeypatch.setattr(train_lib, "TensorBoardSink", lambda logdir, purge_step: made.append(purge_step) or
                        TensorBoardSink(str(tmp_path), purge_step))
    config = presets.get("ppo-cartpole-anakin")
    (tmp_path / "run").mkdir()
    sinks = train_lib.make_sinks(config, str(tmp_path / "run"), False, Progress(updates=2, env_steps=200, rows=2))
    assert made == [201]
    for step in (300, 400):
        sinks.write({"env_steps": step, "loss": -float(step)})
    sinks.close()
    assert _tensorboard_scalars(tmp_path)["loss"] == [(100, 100.0), (200, 200.0), (300, -300.0), (400, -400.0)]
    train_lib.make_sinks(config, str(tmp_path / "run"), False, None).close()
    assert made == [201, 0] and not any(_tensorboard_scalars(tmp_path).values())


def test_agent_means_weight_step_metrics_by_gradient_steps():
    """A replay agent's per-step metrics (`Algorithm.step_metrics`) are means over the
    row's gradient steps: an update that took none reports 0 and must not dilute them; the
    rest are means over updates; per-seed sums give the mean of the seeds'."""
    # Three updates: 0, 1 and 3 gradient steps, losses 0 (none taken), 2 and 4.
    sums = {"loss": np.float32(6.0), "gradient_steps": np.float32(4.0), "epsilon": np.float32(1.5)}
    by_step = {"loss": np.float32(0 * 0 + 1 * 2 + 3 * 4), "gradient_steps": np.float32(10.0),
               "epsilon": np.float32(1.0)}
    means = metrics_lib.agent_means(sums, 3, ("loss",), by_step)
    assert means == {"loss": pytest.approx(14 / 4), "gradient_steps": pytest.approx(4 / 3), "epsilon": 0.5}
    assert metrics_lib.agent_means(sums, 3, ("loss",), None)["loss"] == pytest.approx(2.0)  # no weights known
    idle = metrics_lib.agent_means({"loss": np.zeros(2), "gradient_steps": np.zeros(2)}, 4, ("loss",),
                                   {"loss": np.zeros(2)})
    assert idle == {"loss": 0.0, "gradient_steps": 0.0}  # a row that took no step
    seeds = metrics_lib.agent_means({"loss": np.array([1.0, 2.0]), "gradient_steps": np.array([1.0, 4.0])}, 2,
                                    ("loss",), {"loss": np.array([1.0, 2.0])})
    assert seeds["loss"] == pytest.approx((1.0 / 1.0 + 2.0 / 4.0) / 2)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["anakin", "sebulba"])
def test_a_row_spanning_learning_starts_is_not_diluted(arch):
    """DQN's first learning update falls inside a row (a host call of 4 updates, or 4
    updates per Sebulba row) and later ones learn at a fractional replay ratio: the rows'
    per-step metrics average the gradient steps taken, so uniform replay's importance
    weight reads exactly 1 in every row that learned (diluted by the idle updates it read
    0.5 and less) and the loss is positive."""
    from podracer.agents import DQNConfig

    agent = DQNConfig(buffer_size=512, batch_size=16, replay_ratio=0.3, learning_starts=192, hidden_sizes=(16,))
    if arch == "anakin":
        config = Config(env=EnvConfig("CartPole-v1"), agent=agent, log=QUIET, total_env_steps=4 * 16 * 12,
                        arch=AnakinConfig(num_envs=4, rollout_length=16, updates_per_call=4, devices=(0,)))
    else:
        config = Config(env=EnvConfig("CartPole-v1"), agent=agent, log=QUIET, total_env_steps=4 * 16 * 12,
                        arch=SebulbaConfig(num_envs=4, rollout_length=16, actor_devices=(0,), learner_devices=(1,),
                                           updates_per_log=4))
    rows = train_lib.train(config).metrics
    learned = [row for row in rows if row["gradient_steps"] > 0]
    assert len(learned) == 3 and rows[0]["learning"] == 0.5  # updates 3 and 4 of the first row learn
    for row in learned:
        assert row["importance_weight"] == 1.0 and row["loss"] > 0 and row["grad_norm"] > 0
