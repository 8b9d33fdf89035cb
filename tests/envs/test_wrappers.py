"""The generic wrappers (`GymnaxAPIEnv`, `TimeStepEnv`) hold the environment contract with
small hand-written environments of each kind (no suite needed): specs traced from a reset,
termination kept apart from truncation (the time limit's and the environment's own), the
final observation of an episode that ended, legal-action masks from an `action_mask` field."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from podracer.config import EnvConfig
from podracer.envs import GymnaxAPIEnv, TimeStepEnv, action_spec_of, make_configured_jax_env, register_jax_env
from podracer.envs.wrappers import WrappedJaxEnv
from podracer.types import BoxSpec, DiscreteSpec, MaskedObs, ObsSpec

GOAL = 3  # a walk on 0 .. GOAL from 0, +1 per step right, terminated at GOAL


@struct.dataclass
class Params:
    max_steps_in_episode: int = 8
    step_size: int = 1
    num_actions: int = 2  # the action space's size, as gymnax's spaces read their parameters


class Discrete:  # gymnax's `spaces.Discrete`
    def __init__(self, n):
        self.n = n


class GymnaxStyleWalk:
    """A gymnax-API environment: `step` resets by itself, `step_env` does not. Its `done`
    includes its own time limit (as Craftax's): `time >= max_steps_in_episode`."""

    default_params = Params()

    def reset_env(self, key, params):
        state = (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))  # position, time
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        position, time = state
        position = jnp.clip(position + (2 * action - 1) * params.step_size, 0, GOAL)
        time = time + 1
        state = (position, time)
        done = (position == GOAL) | (time >= params.max_steps_in_episode)
        return self._obs(state), state, (position == GOAL).astype(jnp.float32), done, {"time": time}

    def reset(self, key, params):
        return self.reset_env(key, params)

    def step(self, key, state, action, params):  # gymnax's auto-reset: the final obs is lost
        obs, state, reward, done, info = self.step_env(key, state, action, params)
        reset_obs, reset_state = self.reset_env(key, params)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, state)
        return jnp.where(done, reset_obs, obs), state, reward, done, info

    def _obs(self, state):
        return jax.nn.one_hot(state[0], GOAL + 1)

    def action_space(self, params):
        return Discrete(params.num_actions)


class NoStepEnv:
    """Only `reset` and a non-resetting `step` (no `reset_env`/`step_env`)."""

    def __init__(self):
        self._env = GymnaxStyleWalk()
        self.default_params = Params()

    def reset(self, key, params):
        return self._env.reset_env(key, params)

    def step(self, key, state, action, params):
        return self._env.step_env(key, state, action, params)

    def action_space(self, params):
        return self._env.action_space(params)


def _run(env, actions, params=None):
    """`(obs of the reset, [TimeStep per action])`, stepping one environment."""
    params = env.default_params if params is None else params
    state, obs = env.reset(jax.random.key(0), params)
    step = jax.jit(lambda key, state, action: env.step(key, state, action, params))
    steps = []
    for i, action in enumerate(actions):
        state, timestep = step(jax.random.key(i + 1), state, jnp.int32(action))
        steps.append(timestep)
    return obs, steps


def test_gymnax_api_env_steps_without_reset_and_keeps_the_final_observation():
    env = GymnaxAPIEnv(GymnaxStyleWalk())
    assert env.observation_spec(env.default_params) == ObsSpec((GOAL + 1,), np.dtype(np.float32))
    assert env.action_spec(env.default_params) == DiscreteSpec(2)
    assert env.max_episode_steps(env.default_params) == 8  # the parameters' max_steps_in_episode
    _, steps = _run(env, [1, 1, 1, 1])
    ended = steps[2]
    assert bool(ended.terminated) and not bool(ended.truncated) and float(ended.reward) == 1.0
    np.testing.assert_array_equal(ended.final_obs, np.eye(GOAL + 1)[GOAL])  # the goal, not the reset
    np.testing.assert_array_equal(ended.obs, np.eye(GOAL + 1)[0])
    assert int(ended.episode_length) == 3


@pytest.mark.parametrize("truncation", [None, "time_limit", lambda state, info, params: info["time"] >= 8,
                                        lambda state, info, params: (info["time"] >= 8).astype(jnp.float32)])
def test_gymnax_api_env_a_done_at_the_time_limit_is_a_truncation_when_told(truncation):
    env = GymnaxAPIEnv(NoStepEnv(), truncation=truncation)  # `step` (no step_env) must not reset
    _, steps = _run(env, [0] * 8)
    assert not any(bool(s.terminated | s.truncated) for s in steps[:7])
    last = steps[7]
    # without a rule every `done` terminates, even the one at the time limit (the user's
    # problem the rule solves: Craftax's `done` includes its time limit)
    assert bool(last.truncated) == (truncation is not None) and bool(last.terminated) == (truncation is None)
    np.testing.assert_array_equal(last.final_obs, np.eye(GOAL + 1)[0])


def test_gymnax_api_env_own_time_limit_below_the_wrappers_is_its_truncation():
    """`done` at the environment's own limit (4) with the wrapper's at 10: a truncation
    only where the rule says so."""
    params = Params(max_steps_in_episode=4)
    told = GymnaxAPIEnv(NoStepEnv(), params=params, max_episode_steps=10,
                        truncation=lambda state, info, params: info["time"] >= params.max_steps_in_episode)
    untold = GymnaxAPIEnv(NoStepEnv(), params=params, max_episode_steps=10)
    for env, truncated in ((told, True), (untold, False)):
        _, steps = _run(env, [0] * 5)
        assert bool(steps[3].truncated) == truncated and bool(steps[3].terminated) == (not truncated)
        assert int(steps[3].episode_length) == 4 and int(steps[4].episode_length) == 1


def test_gymnax_api_env_without_a_time_limit_is_refused():
    class Bare(NoStepEnv):
        def __init__(self):
            super().__init__()
            self.default_params = None

    with pytest.raises(ValueError, match="max_episode_steps"):
        GymnaxAPIEnv(Bare())


def test_gymnax_api_env_action_spec_reads_its_parameters():
    env = GymnaxAPIEnv(GymnaxStyleWalk(), params=Params(num_actions=3))
    assert env.action_spec(env.default_params) == DiscreteSpec(3)


class WalkObs(NamedTuple):
    position: jax.Array  # float32 [GOAL + 1], one-hot
    action_mask: jax.Array  # bool [2]: left illegal at 0


class DmTimeStep(NamedTuple):  # dm_env's TimeStep
    step_type: jax.Array
    reward: jax.Array
    discount: jax.Array
    observation: Any


class DmEnvWalk:
    """A Jumanji-style environment: its state carries its own step count, its last step is
    a termination (discount 0) at GOAL or its own truncation (discount 1) after 5 steps."""

    time_limit = 10
    action_spec = Discrete(2)

    def reset(self, key):
        state = (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return state, DmTimeStep(jnp.int32(0), jnp.float32(0), jnp.float32(1), self._obs(state))

    def step(self, state, action):
        position, time = state
        position, time = jnp.clip(position + 2 * action - 1, 0, GOAL), time + 1
        state = (position, time)
        terminated, truncated = position == GOAL, time >= 5
        step_type = jnp.where(terminated | truncated, 2, 1)
        discount = jnp.where(terminated, 0.0, 1.0)
        return state, DmTimeStep(step_type, terminated.astype(jnp.float32), discount, self._obs(state))

    def _obs(self, state):
        return WalkObs(jax.nn.one_hot(state[0], GOAL + 1), jnp.array([state[0] > 0, True]))


def test_timestep_env_keeps_termination_and_its_own_truncation_apart():
    env = TimeStepEnv(DmEnvWalk())
    assert env.max_episode_steps(None) == 10  # the environment's time_limit
    assert env.action_spec(None) == DiscreteSpec(2)
    spec = env.observation_spec(None)
    assert spec == WalkObs(ObsSpec((GOAL + 1,), np.dtype(np.float32)), ObsSpec((2,), np.dtype(bool)))
    _, steps = _run(env, [1, 1, 1, 0, 0, 0, 0, 0])
    assert bool(steps[2].terminated) and not bool(steps[2].truncated)
    np.testing.assert_array_equal(steps[2].final_obs.position, np.eye(GOAL + 1)[GOAL])
    truncated = steps[7]  # five steps after the reset: the environment's own truncation
    assert bool(truncated.truncated) and not bool(truncated.terminated)
    assert int(truncated.episode_length) == 5
    assert not any(bool(s.terminated | s.truncated) for s in steps[3:7])


class RandomStartWalk(DmEnvWalk):
    """Its first position comes from the reset's key (as Jumanji's environments draw theirs
    from it): the key's last word modulo GOAL, the seed itself for a seed below GOAL."""

    def reset(self, key):
        state = (jax.random.key_data(key)[-1].astype(jnp.int32) % GOAL, jnp.zeros((), jnp.int32))
        return state, DmTimeStep(jnp.int32(0), jnp.float32(0), jnp.float32(1), self._obs(state))


def test_timestep_env_resets_with_the_key_it_is_given():
    env = TimeStepEnv(RandomStartWalk())
    for seed in (1, 2):
        _, obs = env.reset(jax.random.key(seed))
        np.testing.assert_array_equal(obs.position, np.eye(GOAL + 1)[seed])


def test_timestep_env_names_and_time_limits():
    assert TimeStepEnv(DmEnvWalk()).name == "DmEnvWalk"
    assert TimeStepEnv(DmEnvWalk(), name="walk").name == "walk"
    assert TimeStepEnv(DmEnvWalk(), max_episode_steps=3).max_episode_steps(None) == 3

    class NoLimit(DmEnvWalk):
        time_limit = None

    class NoLimitAttribute:  # no `time_limit` at all
        action_spec = Discrete(2)

    for env in (NoLimit(), NoLimitAttribute()):
        with pytest.raises(ValueError, match="no time limit; pass max_episode_steps"):
            TimeStepEnv(env)


def test_timestep_env_action_mask_field_is_a_masked_obs_through_the_registry():
    register_jax_env("WrappedDmEnvWalk-v0", lambda: TimeStepEnv(DmEnvWalk()), overwrite=True)
    env = make_configured_jax_env(EnvConfig("WrappedDmEnvWalk-v0"))
    spec = env.observation_spec(env.default_params)
    assert spec == MaskedObs(ObsSpec((GOAL + 1,), np.dtype(np.float32)), ObsSpec((2,), np.dtype(bool)))
    obs, steps = _run(env, [1, 0])
    np.testing.assert_array_equal(obs.action_mask, [False, True])
    np.testing.assert_array_equal(steps[0].obs.action_mask, [True, True])


def test_action_specs_from_each_librarys_spaces():
    class Box:  # gymnax's Box
        shape, dtype, low, high = (2,), np.float32, -1.0, 2.0

    class Bounded:  # dm_env/Jumanji's BoundedArray
        shape, dtype, minimum, maximum = (3,), np.dtype(np.float32), np.zeros(3), np.ones(3)

    class NavixDiscrete:  # navix's Discrete(minimum, maximum)
        shape, dtype, minimum, maximum = (), np.int32, np.int32(0), np.int32(6)

    class DiscreteArray:  # dm_env's
        num_values = 4

    assert action_spec_of(Discrete(3)) == DiscreteSpec(3)
    assert action_spec_of(DiscreteArray()) == DiscreteSpec(4)
    assert action_spec_of(NavixDiscrete()) == DiscreteSpec(7)
    box = action_spec_of(Box())
    assert isinstance(box, BoxSpec) and box.shape == (2,)
    np.testing.assert_array_equal(box.high, [2.0, 2.0])
    assert action_spec_of(Bounded()).shape == (3,)
    with pytest.raises(ValueError, match="neither discrete nor a bounded box"):
        action_spec_of(object())


def test_multi_discrete_action_spaces_are_refused():
    class MultiDiscreteArray:  # Jumanji's: a bounded int box whose num_values is an array
        shape, dtype = (2,), np.dtype(np.int32)
        num_values = np.array([3, 4])
        minimum, maximum = np.zeros(2, np.int32), num_values - 1

    with pytest.raises(ValueError, match="neither discrete nor a bounded box"):
        action_spec_of(MultiDiscreteArray())


class FloatFlagWalk(WrappedJaxEnv):
    """A subclass whose `_step` gives its flags as float32 (as Brax's `done` is): a last
    step at GOAL (a termination) or after 2 steps short of it (its own truncation)."""

    def __init__(self):
        super().__init__(None, None, 10, "FloatFlagWalk")

    def _reset(self, key, params):
        return jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)

    def _step(self, key, state, action, params):
        position = state.env_state + action
        truncated = (state.steps + 1 >= 2) & (position != GOAL)
        done = (position == GOAL) | truncated
        flags = done.astype(jnp.float32), truncated.astype(jnp.float32)
        return position, position.astype(jnp.float32), jnp.float32(0), *flags

    def action_spec(self, params):
        return DiscreteSpec(GOAL + 1)


def test_wrapped_env_reads_flags_given_as_floats_as_booleans():
    """`WrappedJaxEnv` reads the flags a subclass's `_step` returns as booleans, and its
    state's `truncated` keeps the `bool []` a reset gives it (a scan's carry must)."""
    env = FloatFlagWalk()
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    state, goal = step(jax.random.key(1), state, jnp.int32(GOAL))
    assert bool(goal.terminated) and not bool(goal.truncated)
    state, first = step(jax.random.key(2), state, jnp.int32(0))
    assert not bool(first.terminated | first.truncated) and state.inner.truncated.dtype == jnp.bool_
    _, second = step(jax.random.key(3), state, jnp.int32(0))
    assert bool(second.truncated) and not bool(second.terminated)
