"""`EnvConfig.params` (`--env.params name=value`): JAX environment parameters set by name."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from podracer.config import ConfigError, EnvConfig
from podracer.envs import make_configured_jax_env
from podracer.envs.base import JaxEnv
from podracer.envs.host import host_env_specs, make_host_env
from podracer.envs.params import check_finite_start, with_params
from podracer.types import DiscreteSpec, ObsSpec
from tests.support.helpers import assert_one_line_error, run_main


def test_params_replace_fields_of_a_gymnax_environment():
    """MemoryChain's memory length and time limit are set, converted to the field's type,
    and the dynamics use them: the episode lasts memory_length + 1 steps."""
    env = make_configured_jax_env(EnvConfig("MemoryChain-bsuite", params=("memory_length=7", "max_steps_in_episode=50")))
    assert env.default_params.memory_length == 7 and env.default_params.max_steps_in_episode == 50
    state, _ = env.reset(jax.random.key(0), env.default_params)
    for t in range(8):
        state, ts = env.step(jax.random.key(t), state, 0, env.default_params)
        assert bool(ts.terminated) == (t == 7)


def test_params_on_a_jax_environment_stepped_on_the_host():
    config = EnvConfig("MemoryChain-bsuite", backend="jax", params=("memory_length=3",))
    env = make_host_env(config, num_envs=2, seed=0)
    try:
        env.reset()
        ends = []
        for _ in range(8):
            env.send(np.zeros(2, np.int32))
            ends.append(bool(env.recv().timestep.terminated[0]))
    finally:
        env.close()
    assert ends == [False, False, False, True] * 2
    assert host_env_specs(config)[0].shape == (3,)


@pytest.mark.parametrize("params, message", [
    (("memory=3",), "no parameter memory"),
    (("memory_length",), "name=value"),
    (("memory_length=three",), "memory_length must be int"),
])
def test_bad_params_name_the_field(params, message):
    with pytest.raises(ConfigError, match=message):
        make_configured_jax_env(EnvConfig("MemoryChain-bsuite", params=params))


def test_params_are_refused_where_they_cannot_apply(capsys):
    with pytest.raises(ConfigError, match="Catch has no named parameters"):
        make_configured_jax_env(EnvConfig("Catch", params=("size=3",)))
    with pytest.raises(ConfigError, match="env.params sets parameters of JAX environments"):
        host_env_specs(EnvConfig("CartPole-v1", backend="envpool", params=("max_steps_in_episode=3",)))
    assert_one_line_error(*run_main(capsys, "train", "ppo-cartpole-anakin", "--env.params", "gravity"), "env.params")


def test_params_that_make_the_environment_non_finite_are_refused_naming_them(capsys):
    """gymnax does not validate its parameters: MemoryChain with memory_length=0 observes
    1 - t / 0 (NaN). Under Anakin that surfaced only after compiling, as a non-finite loss
    blaming the agent; it is a one-line error naming env.params before anything compiles."""
    with pytest.raises(ConfigError, match="env.params: MemoryChain-bsuite with memory_length=0 returns a non-finite "
                                          "observation on reset$"):
        make_configured_jax_env(EnvConfig("MemoryChain-bsuite", params=("memory_length=0",)))
    assert_one_line_error(*run_main(capsys, "train", "ppo-memory-chain-anakin", "--env.params", "memory_length=0"),
                          "env.params")


@pytest.mark.parametrize("param", ["dt=inf", "max_speed=nan", "max_torque=-inf"])
def test_non_finite_params_are_refused(param):
    """A Config refuses a non-finite number in every field; so does env.params (Pendulum's
    max_torque=inf gave unbounded actions, dt=inf NaN observations)."""
    with pytest.raises(ConfigError, match=f"env.params: {param.split('=')[0]} must be finite"):
        make_configured_jax_env(EnvConfig("Pendulum-v1", params=(param,)))


@struct.dataclass
class _Params:
    slippery: bool
    flag: jax.Array  # bool [], as a parameter held as a JAX scalar
    size: int
    scale: float
    gravity: jax.Array  # float32 []
    weights: jax.Array  # float32 [2]: not settable by one number


class _ParamsEnv:
    """Only what `with_params` reads: named parameters and `replace_params`."""

    def __init__(self, slippery: bool):
        self.default_params = _Params(slippery, jnp.bool_(slippery), 3, 1.0, jnp.float32(9.8), jnp.ones(2))

    def replace_params(self, params):
        self.default_params = params


@pytest.mark.parametrize("text, value", [("false", False), ("0", False), ("FALSE", False), (" False ", False),
                                         ("true", True), ("1", True), ("True", True)])
def test_boolean_params_read_false_and_0_as_false(text, value):
    env = with_params(_ParamsEnv(slippery=not value), (f"slippery={text}", f"flag={text}"), "Walk")
    assert env.default_params.slippery is value and env.default_params.flag is value


def test_numeric_params_take_the_type_of_the_field_they_replace():
    env = with_params(_ParamsEnv(True), ("size=5", "scale=2", "gravity=3.5"), "Walk")
    params = env.default_params
    assert (params.size, params.scale, params.gravity) == (5, 2.0, 3.5)
    assert type(params.size) is int and type(params.scale) is float and type(params.gravity) is float
    assert params.slippery is True  # the fields not named are kept


@pytest.mark.parametrize("param, message", [("slippery=yes", "env.params: slippery must be bool, got 'yes'"),
                                            ("size=2.5", "env.params: size must be int, got '2.5'"),
                                            ("scale=inf", "env.params: scale must be finite, got 'inf'"),
                                            ("weights=1", "env.params: weights must be "),
                                            ("=3", "env.params entries are name=value, got '=3'"),
                                            ("size= ", "env.params entries are name=value, got 'size= '")])
def test_params_of_the_wrong_type_name_the_field(param, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        with_params(_ParamsEnv(True), (param,), "Walk")


@struct.dataclass
class _Divisors:
    obs_div: float = 1.0
    reward_div: float = 1.0


class _Fragile(JaxEnv):
    """Finite on reset; its step divides the observation and the (action's) reward by its
    parameters, as gymnax environments do with parameters they do not validate."""

    def __init__(self):
        self._params = _Divisors()

    @property
    def default_params(self):
        return self._params

    def replace_params(self, params):
        self._params = params

    def reset_env(self, key, params):
        return jnp.zeros(()), jnp.ones(2)

    def step_env(self, key, state, action, params):
        return state, jnp.ones(2) / params.obs_div, (action.astype(jnp.float32) + 1) / params.reward_div, False

    def max_episode_steps(self, params):
        return 10

    def observation_spec(self, params):
        return ObsSpec((2,), np.dtype(np.float32))

    def action_spec(self, params):
        return DiscreteSpec(2)


@pytest.mark.parametrize("param, what", [("obs_div=0", "observation after a step"), ("reward_div=0", "reward")])
def test_a_first_step_that_is_non_finite_is_refused_naming_what(param, what):
    env = with_params(_Fragile(), (param,), "Fragile")
    with pytest.raises(ConfigError, match=f"env.params: Fragile with {param} returns a non-finite {what}$"):
        check_finite_start(env, (param,), "Fragile")
    check_finite_start(with_params(_Fragile(), ("obs_div=2",), "Fragile"), ("obs_div=2",), "Fragile")  # finite
