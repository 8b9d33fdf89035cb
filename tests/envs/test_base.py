"""What `JaxEnv.step` adds to every environment's raw dynamics, against a hand-written
environment whose observations record what `step_env` and `reset_env` were given: actions
clipped to the box, the key split between the step and the reset, the time limit kept apart
from termination, auto-reset with the final observation kept, the episode's return and
length; and the wrappers that delegate to an environment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.envs.base import JaxEnv, JaxEnvWrapper, TimeLimitJaxEnv, clip_action, example_action, step_batch
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec

LOW, HIGH = np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32)


class Recorder(JaxEnv):
    """A walk on a line from 0, moved by the action's first entry: terminated at 3 or more
    (a float32 flag, as Brax's `done` is); its observation is `[action seen by step_env, a
    uniform draw of the key it was given]`, `[0, params, draw]` after a reset; reward = the
    action's sum; its own truncation below `-params`. Its parameters are its time limit."""

    name = "Recorder"

    @property
    def default_params(self):
        return 4  # the time limit

    def reset_env(self, key, params):
        return jnp.zeros((), jnp.float32), jnp.stack([0.0, params, jax.random.uniform(key)])

    def step_env(self, key, state, action, params):
        position = state + action[0]
        obs = jnp.concatenate([action, jax.random.uniform(key)[None]])
        return position, obs, action.sum(), (position >= 3).astype(jnp.float32)

    def max_episode_steps(self, params):
        return params

    def own_truncation(self, state, params):
        return state < -params

    def observation_spec(self, params):
        return ObsSpec((3,), np.dtype(np.float32))

    def action_spec(self, params):
        return BoxSpec((2,), LOW, HIGH)


def _steps(env, actions, key=0):
    state, _ = env.reset(jax.random.key(key))
    out = []
    for i, action in enumerate(actions):
        step_key = jax.random.key(100 + i)
        state, timestep = env.step(step_key, state, jnp.asarray(action, jnp.float32))
        out.append((step_key, state, timestep))
    return out


def test_step_clips_the_action_and_splits_the_key_between_step_and_reset():
    """`step_env` sees the action clipped to the box and the first half of `split(key)`;
    the reset after an episode's end the second half."""
    [(key, state, first)] = _steps(Recorder(), [[5.0, -3.0]])
    np.testing.assert_array_equal(first.obs[:2], [1.0, 0.0])
    assert float(first.obs[2]) == float(jax.random.uniform(jax.random.split(key)[0]))
    assert float(first.reward) == 1.0 and first.reward.dtype == jnp.float32 and float(state.inner) == 1.0


def test_reset_uses_the_parameters_given_else_the_defaults():
    env = Recorder()
    state, obs = env.reset(jax.random.key(0))
    assert float(obs[1]) == 4.0 and state.time.dtype == jnp.int32 and int(state.time) == 0
    assert state.episode_return.dtype == jnp.float32
    _, obs = env.reset(jax.random.key(0), 6)
    assert float(obs[1]) == 6.0


def test_a_termination_resets_and_keeps_the_final_observation_and_totals():
    steps = _steps(Recorder(), [[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 2.0]])
    key, state, ended = steps[2]  # position 3: terminated at the third step
    assert bool(ended.terminated) and not bool(ended.truncated) and ended.terminated.dtype == jnp.bool_
    np.testing.assert_array_equal(ended.final_obs[:2], [1.0, 0.0])
    reset_draw = float(jax.random.uniform(jax.random.split(key)[1]))
    np.testing.assert_array_equal(ended.obs, [0.0, 4.0, reset_draw])  # the next episode's first
    assert float(ended.episode_return) == 4.0 and int(ended.episode_length) == 3
    assert int(state.time) == 0 and float(state.episode_return) == 0.0 and float(state.inner) == 0.0
    _, _, after = steps[3]
    assert float(after.episode_return) == 3.0 and int(after.episode_length) == 1
    np.testing.assert_array_equal(after.obs, after.final_obs)  # no end: the same observation


def test_the_time_limit_truncates_unless_the_episode_terminated():
    env = TimeLimitJaxEnv(Recorder(), 2)
    assert env.max_episode_steps(env.default_params) == 2 and env.default_params == 4
    (_, _, first), (_, state, second) = _steps(env, [[0.5, 0.0], [0.5, 0.0]])
    assert not bool(first.truncated | first.terminated)
    assert bool(second.truncated) and not bool(second.terminated) and int(state.time) == 0
    np.testing.assert_array_equal(second.final_obs[:2], [0.5, 0.0])
    assert int(second.episode_length) == 2 and float(state.episode_return) == 0.0
    *_, (_, _, both) = _steps(TimeLimitJaxEnv(Recorder(), 3), [[1.0, 0.0]] * 3)
    assert bool(both.terminated) and not bool(both.truncated)  # terminated at the limit: not truncated


def test_clip_action_and_example_action():
    box = BoxSpec((2,), LOW, HIGH)
    np.testing.assert_array_equal(clip_action(jnp.array([-5.0, 5.0]), box), [-1.0, 2.0])
    np.testing.assert_array_equal(clip_action(jnp.array([0.5, 0.5]), box), [0.5, 0.5])
    assert clip_action(jnp.array([-5.0, 5.0]), box).dtype == jnp.float32
    assert int(clip_action(jnp.int32(7), DiscreteSpec(3))) == 7  # a discrete action unchanged
    assert example_action(DiscreteSpec(3)) == jax.ShapeDtypeStruct((), np.int32)
    assert example_action(box) == jax.ShapeDtypeStruct((2,), np.float32)


def test_a_wrapper_delegates_everything_it_does_not_override():
    inner = Recorder()
    inner.render_fps = 7
    env = JaxEnvWrapper(inner)
    assert env.name == "Recorder" and env.render_fps == 7 and env.default_params == 4
    assert env.max_episode_steps(4) == 4 and env.observation_spec(4) == inner.observation_spec(4)
    assert env.action_spec(4) == inner.action_spec(4)
    assert bool(env.own_truncation(jnp.float32(-5), 4)) and not bool(env.own_truncation(jnp.float32(-3), 4))
    with pytest.raises(AttributeError, match="env"):  # before __init__: no endless lookup
        _ = JaxEnvWrapper.__new__(JaxEnvWrapper).env
    for wrapped, raw in zip(_steps(env, [[1.0, 0.0]] * 4), _steps(inner, [[1.0, 0.0]] * 4)):
        jax.tree.map(np.testing.assert_array_equal, wrapped[2], raw[2])


class OwnStep(Recorder):
    """Overrides `step`: `step_batch` then vmaps it as it is."""

    def step(self, key, state, action, params=None):
        return super().step(key, state, action, params)


def test_step_batch_passes_the_parameters_given_to_an_overridden_step():
    env = OwnStep()
    keys = jax.random.split(jax.random.key(0), 2)
    state, _ = jax.vmap(env.reset, in_axes=(0, None))(keys, 2)
    actions = jnp.full((2, 2), 0.25)
    step = jax.jit(lambda state: step_batch(env, keys, state, actions, 2))
    state, first = step(state)
    _, second = step(state)  # a time limit of 2, not the default 4
    assert not first.truncated.any() and second.truncated.all()
