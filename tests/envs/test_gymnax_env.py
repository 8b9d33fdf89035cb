"""The gymnax adapter against gymnax's own environment: transitions, specs, constructor
options, parameters and CartPole's frames."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.envs.gymnax_env import GymnaxCartPole, GymnaxEnv, make_gymnax_env
from podracer.envs.render import cartpole_frame
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec


@functools.partial(jax.jit, static_argnums=(0, 1))
def _side_by_side(env, raw, keys, actions):
    """The adapter's `reset_env`/`step_env` and gymnax's own, from the same keys and actions:
    `((obs, reward, terminated) of the adapter, the same of gymnax)`, each `[T, ...]`."""
    params = env.default_params
    state, _ = env.reset_env(keys[0], params)
    _, raw_state = raw.reset_env(keys[0], params)

    def step(carry, inputs):
        state, raw_state = carry
        key, action = inputs
        state, obs, reward, terminated = env.step_env(key, state, action, params)
        raw_obs, raw_state, raw_reward, raw_terminated, _ = raw.step_env(key, raw_state, action, params)
        return (state, raw_state), ((obs, reward, terminated), (raw_obs, raw_reward, raw_terminated))

    return jax.lax.scan(step, (state, raw_state), (keys[1:], actions))[1]


def test_steps_are_gymnax_step_env_with_the_same_keys_and_actions():
    """Catch-bsuite (4 x 3) draws the ball's column from the step's key after each landing, and
    its paddle moves by the action: 12 steps, 3 landings, equal to gymnax's own."""
    env = GymnaxEnv("Catch-bsuite", rows=4, columns=3)
    keys = jax.random.split(jax.random.key(3), 13)
    actions = jnp.asarray([0, 2, 1, 2, 0, 0, 1, 2, 2, 0, 1, 0], jnp.int32)
    ours, theirs = _side_by_side(env, env._env, keys, actions)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(ours[2])), [2, 6, 10])  # a new ball the step after


def test_constructor_options_reach_gymnax():
    """Keyword arguments are the gymnax environment's own: a 4 x 3 Catch board, Breakout with
    its full action set (6 actions, 3 in the minimal one)."""
    env = GymnaxEnv("Catch-bsuite", rows=4, columns=3)
    assert env.name == "Catch-bsuite"
    assert env.observation_spec(env.default_params) == ObsSpec((4, 3), jnp.dtype(jnp.float32))
    full = make_gymnax_env("Breakout-MinAtar", use_minimal_action_set=False)
    assert full.action_spec(full.default_params) == DiscreteSpec(6)
    assert GymnaxEnv("Breakout-MinAtar").action_spec(None) == DiscreteSpec(3)


def test_a_continuous_action_space_is_a_box_of_the_adapters_parameters():
    """Pendulum's torque: `[1]` in `[-max_torque, max_torque]`, from the adapter's own
    parameters once they are replaced (the spec is static, whatever parameters are passed)."""
    env = GymnaxEnv("Pendulum-v1")
    spec = env.action_spec(env.default_params)
    assert isinstance(spec, BoxSpec) and spec.shape == (1,)
    np.testing.assert_array_equal(spec.low, [-2.0])
    np.testing.assert_array_equal(spec.high, [2.0])
    env.replace_params(env.default_params.replace(max_torque=0.5))
    assert env.default_params.max_torque == 0.5
    spec = env.action_spec(None)
    np.testing.assert_array_equal(spec.low, [-0.5])
    np.testing.assert_array_equal(spec.high, [0.5])


def test_make_gymnax_env_gives_cartpole_its_renderer():
    cartpole, acrobot = make_gymnax_env("CartPole-v1"), make_gymnax_env("Acrobot-v1")
    assert type(cartpole) is GymnaxCartPole and cartpole.name == "CartPole-v1"
    assert type(acrobot) is GymnaxEnv and acrobot.name == "Acrobot-v1"
    assert GymnaxCartPole().name == "CartPole-v1"


@pytest.mark.parametrize("length", [0.5, 1.0])
def test_cartpole_draws_its_cart_and_pole_with_its_parameters(length):
    """The frame of a state is `cartpole_frame` of its position and angle, drawn with the
    adapter's rail half-width (4.8, not the default 2.4) and pole half-length."""
    env = make_gymnax_env("CartPole-v1")
    env.replace_params(env.default_params.replace(x_threshold=4.8, length=length))
    state, _ = env.reset_env(jax.random.key(0), env.default_params)
    state = state.replace(x=jnp.float32(1.5), theta=jnp.float32(0.3))
    frame = jax.jit(env.render)(state)
    expected = jax.jit(cartpole_frame, static_argnums=(2, 3))(1.5, 0.3, 4.8, length)
    np.testing.assert_array_equal(np.asarray(frame), np.asarray(expected))
