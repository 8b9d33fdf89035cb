"""A JAX environment stepped on the host (Sebulba's "jax" backend): its seeding, its episode
ends and the order of `reset`, `send` and `recv`, on Catch (10 x 5: an episode lasts 9 steps).
Each `JaxHostEnv` compiles its own reset and step (seconds on a CPU): the tests that step or
compare several are slow."""

import numpy as np
import pytest

from podracer.config import EnvConfig
from podracer.envs.jax_host import JaxHostEnv, jax_host_specs
from podracer.types import DiscreteSpec, ObsSpec, TimeStep

CATCH = EnvConfig("Catch", backend="jax")


def _columns(obs):
    """The ball's column in each `[B, 10, 5]` board's top row."""
    return np.argmax(np.asarray(obs)[:, 0], axis=-1)


def test_specs_are_the_jax_environments():
    spec = (ObsSpec((10, 5), np.dtype(np.float32)), DiscreteSpec(3))
    assert jax_host_specs(CATCH) == spec
    env = JaxHostEnv(CATCH, num_envs=2, seed=0)
    assert (env.observation_spec, env.action_spec) == spec and env.num_envs == 2
    assert jax_host_specs(EnvConfig("Catch", backend="jax", observe=(0,))) == spec  # `observe` is the host's


@pytest.mark.slow
def test_a_seed_draws_every_environment_its_own_start_and_the_same_seed_the_same_one():
    obs = [JaxHostEnv(CATCH, num_envs=8, seed=seed).reset() for seed in (3, 3, 4)]
    assert obs[0].shape == (8, 10, 5)
    np.testing.assert_array_equal(obs[0], obs[1])
    assert len(set(_columns(obs[0]))) > 1 and not np.array_equal(obs[0], obs[2])


@pytest.mark.slow
def test_an_episode_ends_where_the_ball_lands_and_the_next_starts():
    """Staying still, every episode terminates at its 9th step (reward +1 where the ball fell
    in the paddle's column, 2, else -1), is an episode end, and the next board starts."""
    env = JaxHostEnv(CATCH, num_envs=4, seed=1)
    first = env.reset()
    for t in range(1, 10):
        env.send(np.ones(4, np.int32))
        step = env.recv()
        ts = step.timestep
        assert ts.terminated.all() == (t == 9) and not ts.truncated.any()
        np.testing.assert_array_equal(step.episode_end, ts.terminated)
    np.testing.assert_array_equal(ts.reward, np.where(_columns(first) == 2, 1.0, -1.0))
    np.testing.assert_array_equal(ts.episode_length, 9)
    assert np.asarray(ts.obs)[:, 0].sum() == 4 and np.asarray(ts.final_obs)[:, 0].sum() == 0


def test_recv_needs_a_reset_and_a_send():
    """Checked before anything is stepped: no step is compiled here."""
    message = r"recv\(\) without a reset\(\) and a send\(\)"
    env = JaxHostEnv(CATCH, num_envs=2, seed=0)
    env.send(np.ones(2, np.int32))
    with pytest.raises(RuntimeError, match=message):
        env.recv()  # no reset
    env = JaxHostEnv(CATCH, num_envs=2, seed=0)
    env.reset()
    with pytest.raises(RuntimeError, match=message):
        env.recv()  # no send
    env.send(np.ones(2, np.int32))
    env.close()
    with pytest.raises(RuntimeError, match=message):
        env.recv()  # closed


def test_an_episode_ends_where_a_step_terminates_or_truncates():
    """`recv`'s bookkeeping around a scripted batched step (nothing compiled): the episode
    ends are `terminated | truncated`, as NumPy, and the step's key and state are kept."""
    env = JaxHostEnv(CATCH, num_envs=3, seed=0)
    zeros = np.zeros(3, np.float32)
    timestep = TimeStep(
        zeros, zeros, np.array([True, False, False]), np.array([False, True, False]), zeros, zeros, np.ones(3, np.int32)
    )
    env._step = lambda key, state, action: ("next key", "next state", timestep)
    env._state = "state"
    env.send(np.ones(3, np.int32))
    step = env.recv()
    np.testing.assert_array_equal(step.episode_end, [True, True, False])
    assert step.timestep is not None and np.array_equal(step.timestep.terminated, timestep.terminated)
    assert (env._key, env._state) == ("next key", "next state")
