"""Counts exact past 2**31 (`podracer.counters.Count`) and DQN's counters near the limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import DQNConfig, dqn
from podracer.checkpoint import Checkpointer, Progress
from podracer.counters import Count
from podracer.types import DiscreteSpec, ObsSpec, Trajectory


def test_count_is_exact_across_both_word_limits():
    """Adding across 2**31 (int32's limit) and 2**32 (the low word's carry), under jit."""
    add = jax.jit(lambda c, n: c.add(n))
    count = Count.of(2**31 - 3)
    values = []
    for n in (2, 1, 2**31 - 2, 1, 1, 3_000_000_000):
        count = add(count, jnp.uint32(n))
        values.append(int(count))
    expected = np.cumsum([2**31 - 3, 2, 1, 2**31 - 2, 1, 1, 3_000_000_000])[1:].tolist()
    assert values == expected and values[1] == 2**31 and values[4] == 2**32
    big = Count.of(2**40 + 123)
    assert bool(big.ge(2**40 + 123)) and not bool(big.ge(2**40 + 124)) and bool(big.ge(5))
    for divisor in (1, 7, 500, 2**16, 2**16 + 1, 2**31 - 1):
        assert int(jax.jit(lambda c, d=divisor: c.mod(d))(big)) == (2**40 + 123) % divisor
    assert float(big.as_float()) == pytest.approx(2.0**40, rel=1e-6)
    with pytest.raises(ValueError):
        Count.of(2**64)


def test_counts_survive_a_checkpoint(tmp_path):
    state = {"count": Count.of(2**40 + 7), "other": jnp.ones(3)}
    with Checkpointer(str(tmp_path)) as checkpoints:
        checkpoints.save(state, Progress(updates=1))
        restored, _ = checkpoints.restore(jax.tree.map(jnp.zeros_like, state))
    assert int(restored["count"]) == 2**40 + 7


@pytest.mark.timeout(120)
def test_dqn_counters_stay_exact_past_int32():
    """A DQN learner that has seen 2**31 - 8 env steps and taken 2**32 - 1 gradient steps:
    the next update brings 16 env steps (learning starts at 2**31, so it learns), counts
    them exactly, and its gradient step, the 2**32-th, is a target update (period 256)."""
    config = DQNConfig(buffer_size=64, batch_size=8, learning_starts=2**31, target_update_period=256,
                       epsilon_decay_steps=1000, hidden_sizes=(8,))
    agent = dqn.make_dqn(config, ObsSpec((2,), jnp.float32), DiscreteSpec(2), num_updates=10, axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(0))
    near = Count.of(2**31 - 8)
    state = state.replace(params=state.params._replace(env_steps=near),
                          opt_state=state.opt_state._replace(gradient_steps=Count.of(2**32 - 1), learning_env_steps=near))
    rng = np.random.default_rng(0)
    T, B = 4, 4
    traj = Trajectory(rng.normal(size=(T, B, 2)).astype(np.float32), np.zeros((T, B), np.int32),
                      np.ones((T, B), np.float32), np.zeros((T, B), bool), np.zeros((T, B), bool),
                      rng.normal(size=(T, B, 2)).astype(np.float32), {})
    new, metrics = jax.jit(agent.update)(state, traj, jax.random.key(1))
    assert int(new.params.env_steps) == 2**31 + 8
    assert int(new.opt_state.learning_env_steps) == 2**31 + 8
    assert int(new.opt_state.gradient_steps) == 2**32
    assert float(metrics["learning"]) == 1.0 and float(metrics["gradient_steps"]) == 1.0
    assert float(metrics["epsilon"]) == pytest.approx(config.epsilon_end)
    for online, target in zip(jax.tree.leaves(new.params.online), jax.tree.leaves(new.opt_state.target)):
        np.testing.assert_array_equal(online, target)  # the hard target update happened
