"""The navix adapter against navix's own environment: specs, navix's keyword arguments and
replaced parameters, an episode to the goal (termination, reward, auto-reset), the time
limit's truncation, frames, and the suite's ids and errors. navix's Empty-5x5 compiles a
reset and a step in well under a second on a CPU, so these are fast tests of the real suite."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

navix = pytest.importorskip("navix", reason="navix is not installed: pip install 'podracer[navix]'")

from podracer.envs.navix_env import NavixEnv, make_suite_env, suite_ids  # noqa: E402
from podracer.types import DiscreteSpec, ObsSpec  # noqa: E402

ID = "Navix-Empty-5x5-v0"
RIGHT, FORWARD = 1, 2  # navix's action set: rotate_ccw, rotate_cw, forward, pickup, drop, toggle, done
# from the start, (1, 1) facing east, to the goal in the far corner, (3, 3): two steps east,
# a right turn, two steps south
TO_GOAL = [FORWARD, FORWARD, RIGHT, FORWARD, FORWARD]


def run(env, actions, key):
    """`env.reset`, then `env.step` (auto-reset and all) with `actions`, to trace: the first
    observation and the stacked TimeSteps `[len(actions), ...]`."""
    state, obs = env.reset(key)

    def body(state, inputs):
        key, action = inputs
        return env.step(key, state, action)

    keys = jax.random.split(key, len(actions))
    return obs, jax.lax.scan(body, state, (keys, jnp.asarray(actions, jnp.int32)))[1]


def test_specs_are_navixs_and_keyword_arguments_reach_navix():
    env = NavixEnv(ID, max_steps=9)
    params = env.default_params
    assert env.name == "navix/Navix-Empty-5x5-v0"
    assert type(params) is type(navix.make(ID)) and params.max_steps == 9
    assert env.max_episode_steps(params) == 9
    assert env.action_spec(params) == DiscreteSpec(7)  # navix's seven actions
    assert env.observation_spec(params) == ObsSpec((5, 5, 3), np.dtype(np.uint8))  # the symbolic grid


def test_the_goal_terminates_with_navixs_reward_and_the_next_episode_starts():
    """Five steps to the goal: reward 1 and a termination at the fifth (navix's own
    TERMINATION), the final observation navix's own, the next episode's first observation
    the start's; a step later the new episode is one step long."""
    env, navix_env = NavixEnv(ID), navix.make(ID)

    @jax.jit
    def episode_and_oracle(key):  # the oracle: navix's own reset and non-resetting steps
        start = navix_env.reset(key)
        goal = jax.lax.scan(lambda t, a: (navix_env._step(t, a), None), start, jnp.asarray(TO_GOAL))[0]
        return run(env, TO_GOAL + [RIGHT], key), start, goal

    (first, ts), start, timestep = jax.device_get(episode_and_oracle(jax.random.key(0)))
    np.testing.assert_array_equal(first, start.observation)
    assert int(timestep.step_type) == 2 and float(timestep.reward) == 1.0

    np.testing.assert_array_equal(ts.reward, [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(ts.terminated, [0, 0, 0, 0, 1, 0])
    assert not ts.truncated.any()
    np.testing.assert_array_equal(ts.final_obs[4], timestep.observation)
    np.testing.assert_array_equal(ts.obs[4], first)  # auto-reset: the start again
    np.testing.assert_array_equal(ts.episode_length, [1, 2, 3, 4, 5, 1])
    np.testing.assert_array_equal(ts.episode_return, [0, 0, 0, 0, 1, 0])


def test_replaced_parameters_set_the_time_limit_that_truncates():
    """navix's own time limit (`max_steps`, a TRUNCATION step type) is a truncation, never a
    termination, here from parameters replaced after construction."""
    env = NavixEnv(ID)
    params = navix.make(ID, max_steps=3)
    env.replace_params(params)
    assert env.default_params is params and env.max_episode_steps(env.default_params) == 3
    _, ts = jax.device_get(jax.jit(lambda key: run(env, [RIGHT] * 4, key))(jax.random.key(0)))
    np.testing.assert_array_equal(ts.truncated, [0, 0, 1, 0])
    assert not ts.terminated.any()
    np.testing.assert_array_equal(ts.episode_length, [1, 2, 3, 1])


def test_the_first_observation_is_navixs_for_the_resets_key():
    """Navix-Empty-Random-5x5 places the agent by the key: the adapter's first observations
    are navix's own for the same keys, and not all the same."""
    env = NavixEnv("Navix-Empty-Random-5x5-v0")
    keys = jax.random.split(jax.random.key(1), 4)
    params = env.default_params
    obs, expected = jax.jit(jax.vmap(lambda key: (env.reset_env(key, params)[1], params.reset(key).observation)))(keys)
    np.testing.assert_array_equal(obs, expected)
    assert len({np.asarray(o).tobytes() for o in obs}) > 1


def test_a_frame_is_navixs_rgb_view_of_the_whole_grid():
    env = NavixEnv(ID)
    state, _ = jax.jit(lambda key: env.reset_env(key, env.default_params))(jax.random.key(0))
    frame, expected = jax.jit(lambda state: (env.render(state), navix.observations.rgb(state.state)))(state)
    assert frame.shape == (40, 40, 3) and frame.dtype == np.uint8  # 8-pixel tiles
    np.testing.assert_array_equal(frame, expected)


def test_suite_ids_and_make_suite_env_by_navixs_registry():
    ids = suite_ids()
    assert len(ids) == len(navix.registry()) and list(ids) == sorted(ids)
    assert "navix/Navix-Empty-5x5-v0" in ids and all(env_id.startswith("navix/") for env_id in ids)
    env = make_suite_env("navix/Navix-DoorKey-5x5-v0")
    assert isinstance(env, NavixEnv) and env.name == "navix/Navix-DoorKey-5x5-v0"
    assert env.max_episode_steps(env.default_params) == navix.make("Navix-DoorKey-5x5-v0").max_steps
    with pytest.raises(KeyError) as error:
        make_suite_env("navix/Navix-Nowhere-v0")
    assert error.value.args == ("Navix-Nowhere-v0",)
