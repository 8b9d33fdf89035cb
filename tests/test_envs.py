"""The JAX environment protocol: auto-reset, final observation, termination vs truncation."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.envs import Catch, GymnaxEnv, UnknownEnvError, make_jax_env


def run(env, actions, key=0):
    """`(first obs, TimeSteps [T, ...])` of `actions`, in one jitted program (eagerly, every
    op would compile on its own)."""
    return _run(env, jnp.asarray(actions), key)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _run(env, actions, key):
    params = env.default_params
    state, obs = env.reset(jax.random.key(key), params)

    def body(state, inputs):
        k, a = inputs
        state, ts = env.step(k, state, a, params)
        return state, ts

    keys = jax.random.split(jax.random.key(key + 1), len(actions))
    return obs, jax.lax.scan(body, state, (keys, actions))[1]


def test_catch_terminates_with_plus_or_minus_one():
    env = Catch(rows=5, columns=3)
    _, ts = run(env, [1] * 12)
    ends = np.flatnonzero(np.asarray(ts.terminated))
    np.testing.assert_array_equal(ends, [3, 7, 11])  # ball lands after rows - 1 steps
    assert set(np.asarray(ts.reward)[ends]) <= {-1.0, 1.0}
    assert not np.asarray(ts.truncated).any()
    np.testing.assert_array_equal(np.asarray(ts.episode_length)[ends], 4)
    # After a terminal step the obs is a fresh board (ball on the top row).
    assert np.asarray(ts.obs)[3][0].sum() == 1.0
    assert np.asarray(ts.final_obs)[3][0].sum() == 0.0


def test_time_limit_truncates_and_keeps_final_observation():
    """MountainCar never reaches the goal with a constant action: every episode is cut
    at 200 steps, as truncation, never termination."""
    env = make_jax_env("MountainCar-v0")
    _, ts = run(env, [1] * 450)
    truncated = np.asarray(ts.truncated)
    np.testing.assert_array_equal(np.flatnonzero(truncated), [199, 399])
    assert not np.asarray(ts.terminated).any()
    np.testing.assert_array_equal(np.asarray(ts.episode_length)[[199, 399]], 200)
    np.testing.assert_array_equal(np.asarray(ts.episode_return)[[199, 399]], -200.0)
    # final_obs is where the episode ended; obs is the reset state of the next one.
    final, nxt = np.asarray(ts.final_obs)[199], np.asarray(ts.obs)[199]
    assert not np.allclose(final, nxt)
    assert -0.6 <= nxt[0] <= -0.4 and nxt[1] == 0.0  # MountainCar's reset distribution
    np.testing.assert_allclose(np.asarray(ts.final_obs)[198], np.asarray(ts.obs)[198])


def test_gymnax_adapter_matches_gymnax_dynamics():
    import gymnax

    env = GymnaxEnv("CartPole-v1")
    raw, raw_params = gymnax.make("CartPole-v1")
    key = jax.random.key(3)
    step, raw_step = jax.jit(env.step), jax.jit(raw.step_env)
    state, obs = jax.jit(env.reset)(key, env.default_params)
    raw_obs, raw_state = jax.jit(raw.reset_env)(key, raw_params)
    np.testing.assert_allclose(obs, raw_obs)
    for t in range(5):
        k = jax.random.key(10 + t)
        state, ts = step(k, state, jnp.int32(t % 2), env.default_params)
        step_key, _ = jax.random.split(k)
        raw_obs, raw_state, raw_r, raw_done, _ = raw_step(step_key, raw_state, jnp.int32(t % 2), raw_params)
        np.testing.assert_allclose(ts.obs, raw_obs, rtol=1e-6)
        assert float(ts.reward) == float(raw_r)


def test_cartpole_terminates_when_pole_falls():
    _, ts = run(make_jax_env("CartPole-v1"), [1] * 100)
    terminated = np.asarray(ts.terminated)
    assert terminated.any() and not np.asarray(ts.truncated).any()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Breakout-MinAtar",
                                    "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Catch"])
def test_registry_builds_and_steps(env_id):
    env = make_jax_env(env_id)
    params = env.default_params
    spec = env.observation_spec(params)
    state, obs = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 2), params)
    assert obs.shape == (2,) + spec.shape
    actions = jnp.zeros(2, jnp.int32)
    _, ts = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(
        jax.random.split(jax.random.key(1), 2), state, actions, params)
    assert ts.obs.shape == obs.shape and ts.reward.shape == (2,)
    assert env.action_spec(params).num_actions >= 2


def test_unknown_env_lists_close_matches():
    with pytest.raises(UnknownEnvError, match="CartPole-v1"):
        make_jax_env("CartPole-v0")
