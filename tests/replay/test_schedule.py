"""The replay schedule: when an update starts learning, the gradient steps it earns at
`replay_ratio` (fractions carried), the env steps counted since learning began, on one
device and on two; and the replay metrics, against hand-computed values."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.counters import Count
from podracer.replay import replay_metrics, schedule_replay


@dataclasses.dataclass(frozen=True)
class Config:
    """The replay fields `schedule_replay` reads, as DQN's, SAC/TD3's and MuZero's configs define them."""

    replay_ratio: float
    learning_starts: int
    batch_size: int = 64

    def steps_per_update(self, per_device_batch: int) -> float:
        return self.replay_ratio * per_device_batch / self.batch_size

    def max_steps_per_update(self, per_device_batch: int) -> int:
        return max(1, math.ceil(self.steps_per_update(per_device_batch)))


class Learner(NamedTuple):
    replay_credit: jax.Array
    learning_env_steps: Count
    gradient_steps: Count


def learner() -> Learner:
    return Learner(jnp.float32(0.0), Count.zeros(), Count.zeros())


BATCH = (2, 8)  # T, B: 16 env steps per device per update


def run_updates(config: Config, updates: int, min_received: int, devices: int | None = None):
    """`updates` schedules in a row from a fresh learner (`devices` vmapped along axis "d", or
    none), each update's `(env_steps, learn, num_steps, credit, learning_env_steps)`."""
    axis = None if devices is None else "d"

    def one(env_steps, learner):
        s = schedule_replay(config, jnp.int32(0), env_steps, learner, BATCH, axis, min_received)
        assert (s.max_steps, s.per_update, s.received) == (
            config.max_steps_per_update(16),
            config.steps_per_update(16),
            16 * (devices or 1),
        )
        assert s.num_steps.dtype == jnp.int32  # a loop's trip count
        return (
            s.env_steps,
            s.learner,
            (int_of(s.env_steps), s.learn, s.num_steps, s.learner.replay_credit, int_of(s.learner.learning_env_steps)),
        )

    step = jax.jit(one if devices is None else jax.vmap(one, axis_name="d"))
    env_steps, state = Count.zeros(), learner()
    if devices is not None:
        env_steps, state = jax.tree.map(lambda x: jnp.stack([x] * devices), (env_steps, state))
    rows = []
    for _ in range(updates):
        env_steps, state, row = step(env_steps, state)
        rows.append([np.asarray(x) for x in row])
    return [np.stack(column) for column in zip(*rows)]


def int_of(count: Count) -> jax.Array:
    return count.lo.astype(jnp.int32)  # the counts here stay far below 2**31


def test_learning_starts_then_earns_steps_at_the_replay_ratio_carrying_fractions():
    """0.75 steps per update (replay ratio 3, 16 steps, batch 64), learning from 40 env steps:
    updates 1-2 (16, 32 steps) do not learn, then credit 0.75, 1.5 -> 1 step, 1.25 -> 1, 1.0 -> 1."""
    env_steps, learn, num_steps, credit, learning_env_steps = run_updates(Config(3.0, 40), 6, min_received=10)
    np.testing.assert_array_equal(env_steps, [16, 32, 48, 64, 80, 96])
    np.testing.assert_array_equal(learn, [False, False, True, True, True, True])
    np.testing.assert_array_equal(num_steps, [0, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(credit, [0.0, 0.0, 0.75, 0.5, 0.25, 0.0], atol=1e-6)
    np.testing.assert_array_equal(learning_env_steps, [0, 0, 16, 32, 48, 64])


@pytest.mark.parametrize("learning_starts, first", [(0, 2), (40, 3)])
def test_a_buffer_must_have_received_min_received_steps_and_whole_steps_are_taken(learning_starts, first):
    """2.5 steps per update (at most 3 a loop): 2, 3, 2, 3 steps once learning; the first
    update that learns is the one reaching both `learning_starts` and `min_received` (20)."""
    _, learn, num_steps, credit, _ = run_updates(Config(10.0, learning_starts), 5, min_received=20)
    np.testing.assert_array_equal(learn, np.arange(1, 6) >= first)
    expected = [2, 3, 2, 3][: 6 - first]
    np.testing.assert_array_equal(num_steps, [0] * (first - 1) + expected)
    np.testing.assert_allclose(credit, [0.0] * (first - 1) + [0.5, 0.0, 0.5, 0.0][: 6 - first], atol=1e-6)


def test_two_devices_count_every_devices_steps():
    """Two devices: 32 env steps an update; each buffer must have received `min_received` (20),
    so learning waits for 40 env steps in all, the second update."""
    env_steps, learn, num_steps, _, learning_env_steps = run_updates(Config(3.0, 0), 3, min_received=20, devices=2)
    np.testing.assert_array_equal(env_steps, [[32, 32], [64, 64], [96, 96]])
    np.testing.assert_array_equal(learn, [[False, False], [True, True], [True, True]])
    np.testing.assert_array_equal(num_steps, [[0, 0], [0, 0], [1, 1]])
    np.testing.assert_array_equal(learning_env_steps, [[0, 0], [32, 32], [64, 64]])


def test_replay_metrics_hand_computed():
    """Replay ratio asked: 0.75 steps x batch 64 per 16 env steps = 3; achieved: gradient steps
    x batch (x devices) per env step since learning began; replay size averaged over devices."""
    config = Config(3.0, 0)
    replay = SimpleNamespace(size=lambda local: local)

    def metrics(size, gradient_steps, learning_env_steps, axis=None):
        state = Learner(jnp.float32(0.0), Count.zeros(), Count.zeros())
        schedule = schedule_replay(config, size, Count.zeros(), state, BATCH, axis, 1)
        after = Learner(jnp.float32(0.0), learning_env_steps, gradient_steps)
        return replay_metrics(config, replay, schedule, after, BATCH, axis)

    one = jax.jit(metrics)(jnp.int32(5), Count.of(6), Count.of(32))
    expected = dict(learning=1.0, gradient_steps=0.0, replay_size=5.0, replay_ratio=3.0, replay_ratio_achieved=12.0)
    assert {k: float(v) for k, v in one.items()} == expected
    assert float(jax.jit(metrics)(jnp.int32(5), Count.zeros(), Count.zeros())["replay_ratio_achieved"]) == 0.0
    two = jax.jit(jax.vmap(lambda size, g, s: metrics(size, g, s, "d"), axis_name="d"))(
        jnp.array([3, 5], jnp.int32),
        jax.tree.map(lambda x: jnp.stack([x, x]), Count.of(6)),
        jax.tree.map(lambda x: jnp.stack([x, x]), Count.of(64)),
    )
    np.testing.assert_array_equal(two["replay_size"], [4.0, 4.0])
    np.testing.assert_array_equal(two["replay_ratio_achieved"], [12.0, 12.0])  # 6 x 64 x 2 / 64
