"""SAC's and TD3's replay loop (`replay_learning.make_replay_update`) with a stand-in gradient
step that hands back the batch it was given: what the buffer holds after each update, which
key each step samples and learns with, the steps taken once `learning_starts` env steps have
arrived, the counts and the metrics; and the buffer's memory check's whole message."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.continuous import SACConfig, replay_learning
from podracer.agents.dqn import sample_transitions
from podracer.config import ConfigError
from podracer.counters import Count
from podracer.types import ObsSpec, Trajectory, box_spec
from tests.support.helpers import assert_trees_equal

OBS_SPEC, ACTION_SPEC = ObsSpec((2,), jnp.float32), box_spec((1,), -1.0, 1.0)
T, B = 3, 2
CONFIG = SACConfig(buffer_size=16, batch_size=4, n_step=2, gamma=0.5, gradient_steps=2, learning_starts=8)
NAMES = ("reward_sum", "key_bits")


def stand_in_step(actor, learner, items, key):
    """Hands back the batch as the new actor, counts the step, and reports the batch's reward
    sum and some bits of its key."""
    del actor
    bits = (jax.random.key_data(key)[-1] % 4096).astype(jnp.float32)
    return (
        items,
        learner._replace(gradient_steps=learner.gradient_steps.add(1)),
        {"reward_sum": jnp.sum(items.reward), "key_bits": bits},
    )


def trajectory(start: float) -> Trajectory:
    """`[T, B]` steps whose observations count on from `start`: each one's next observation
    is the following step's observation, so a later trajectory continues the stream."""
    obs = start + jnp.arange(T * B * 2, dtype=jnp.float32).reshape(T, B, 2) / 2
    next_obs = obs + B
    reward = start + jnp.arange(T * B, dtype=jnp.float32).reshape(T, B)
    terminated = jnp.zeros((T, B), bool).at[1, 0].set(True)
    return Trajectory(
        obs, jnp.full((T, B, 1), 0.5, jnp.float32), reward, terminated, jnp.zeros((T, B), bool), next_obs, {}
    )


def initial(replay):
    learner = replay_learning.ContinuousLearnerState(
        (), (), (), (), (), Count.zeros(), jnp.zeros((), jnp.float32), Count.zeros()
    )
    items = jax.eval_shape(
        lambda: (
            sample_transitions(
                replay,
                replay.init(replay_learning.example_step(OBS_SPEC, ACTION_SPEC)),
                jax.random.key(0),
                jnp.float32(1.0),
                B,
                CONFIG,
            ).items
        )
    )
    actor = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), items)
    return replay_learning.initial_state(actor, learner, replay, OBS_SPEC, ACTION_SPEC)


@pytest.mark.costly
def test_updates_add_the_steps_then_learn_on_batches_sampled_with_each_steps_key():
    """Update 1 (6 env steps, under `learning_starts` 8) only fills the buffer; update 2 (the
    stream continued) takes the 2 gradient steps, step i sampling with the first half of the
    i-th key of the update's key split in 2 and learning with the second."""
    replay = replay_learning.make_buffer(CONFIG)
    state = initial(replay)
    assert state.update_count.dtype == jnp.int32 and int(state.update_count) == 0
    example = jax.tree.map(lambda x: x[0, 0], state.local.experience)
    assert [x.dtype for x in jax.tree.leaves(example)] == [
        jnp.float32,
        jnp.float32,
        jnp.float32,
        bool,
        bool,
        jnp.float32,
        bool,
    ]
    update = jax.jit(replay_learning.make_replay_update(CONFIG, replay, stand_in_step, None, NAMES, "stand-in"))
    first, second = trajectory(0.0), trajectory(float(T * B))
    state1, metrics1 = update(state, first, jax.random.key(1))
    experience = state1.local.experience
    np.testing.assert_array_equal(experience.obs[0, : T * B], first.obs.reshape(T * B, 2))  # time-major
    np.testing.assert_array_equal(experience.next_obs[0, : T * B], first.next_obs.reshape(T * B, 2))
    np.testing.assert_array_equal(experience.reward[0, : T * B], first.reward.reshape(-1))
    np.testing.assert_array_equal(experience.terminated[0, : T * B], first.terminated.reshape(-1))
    np.testing.assert_array_equal(experience.first[0, : T * B], [True, True, False, False, False, False])
    assert_trees_equal(state1.params.actor, state.params.actor)  # no step yet
    assert int(state1.params.env_steps) == T * B and int(state1.update_count) == 1
    assert int(state1.opt_state.gradient_steps) == 0
    expected = {
        "reward_sum": 0.0,
        "key_bits": 0.0,
        "learning": 0.0,
        "gradient_steps": 0.0,
        "replay_ratio": 2 * 4 / 6,
        "replay_size": float(replay.size(state1.local)),
        "replay_ratio_achieved": 0.0,
    }
    assert set(metrics1) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(metrics1[name], value, rtol=1e-6, err_msg=name)

    key = jax.random.key(2)
    state2, metrics2 = update(state1, second, key)
    np.testing.assert_array_equal(state2.local.experience.first[0, T * B : 2 * T * B], [False] * (T * B))
    sums, bits = [], []
    sample = jax.jit(lambda local, key: sample_transitions(replay, local, key, jnp.float32(1.0), B, CONFIG).items)
    for step_key in jax.random.split(key, 2):
        sample_key, learn_key = jax.random.split(step_key)
        items = sample(state2.local, sample_key)
        sums.append(float(jnp.sum(items.reward)))
        bits.append(float(jax.random.key_data(learn_key)[-1] % 4096))
    assert_trees_equal(state2.params.actor, items)  # the last step's batch
    assert int(state2.params.env_steps) == 2 * T * B and int(state2.update_count) == 2
    assert int(state2.opt_state.gradient_steps) == 2
    np.testing.assert_allclose(metrics2["reward_sum"], np.mean(sums), rtol=1e-6)
    np.testing.assert_allclose(metrics2["key_bits"], np.mean(bits), rtol=1e-6)
    assert float(metrics2["learning"]) == 1.0 and float(metrics2["gradient_steps"]) == 2.0


def test_undeclared_step_metrics_are_refused_with_the_algorithms_name():
    replay = replay_learning.make_buffer(CONFIG)
    update = replay_learning.make_replay_update(CONFIG, replay, stand_in_step, None, ("reward_sum",), "stand-in")
    with pytest.raises(TypeError, match=r"^stand-in: the per-step metrics \['key_bits', 'reward_sum'\] differ"):
        jax.eval_shape(update, initial(replay), trajectory(0.0), jax.random.key(0))


class Device:
    device_kind = "tiny"

    def __init__(self, limit):
        self.limit = limit

    def memory_stats(self):
        return None if self.limit is None else {"bytes_limit": self.limit}


@pytest.mark.parametrize("sampling, per_item", [("uniform", 167), ("stratified", 175)])
def test_a_buffer_over_the_devices_memory_is_refused_with_the_sizes(sampling, per_item, monkeypatch):
    """HalfCheetah's 167-byte steps (8 more per slot for stratified sampling's sum tree): a
    buffer that needs more than the device's `bytes_limit` is refused, one that needs exactly
    it is not, nor is any where the device reports no limit."""
    obs_spec, action_spec = ObsSpec((17,), jnp.float32), box_spec((6,), -1.0, 1.0)
    config = SACConfig(buffer_size=1_000_000, sampling=sampling)
    need = 1_000_000 * per_item
    monkeypatch.setattr(replay_learning.jax, "devices", lambda: [Device(need // 2)])
    message = (
        f"agent.buffer_size 1000000 needs {need / 2**30:.2f} GiB per device, more than the "
        f"{need // 2 / 2**30:.2f} GiB tiny has; lower it"
    )
    with pytest.raises(ConfigError) as error:
        replay_learning.check_buffer_fits(config, obs_spec, action_spec)
    assert str(error.value) == message
    for limit in (need, None):
        monkeypatch.setattr(replay_learning.jax, "devices", lambda limit=limit: [Device(limit)])
        replay_learning.check_buffer_fits(config, obs_spec, action_spec)
