"""`EnvConfig.params` (`--env.params name=value`): JAX environment parameters set by name."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from podracer.config import ConfigError, EnvConfig
from podracer.envs import make_configured_jax_env
from podracer.envs.host import host_env_specs, make_host_env
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
    with pytest.raises(ConfigError, match="env.params: MemoryChain-bsuite with memory_length=0 returns a non-finite"):
        make_configured_jax_env(EnvConfig("MemoryChain-bsuite", params=("memory_length=0",)))
    assert_one_line_error(*run_main(capsys, "train", "ppo-memory-chain-anakin", "--env.params", "memory_length=0"),
                          "env.params")


@pytest.mark.parametrize("param", ["dt=inf", "max_speed=nan", "max_torque=-inf"])
def test_non_finite_params_are_refused(param):
    """A Config refuses a non-finite number in every field; so does env.params (Pendulum's
    max_torque=inf gave unbounded actions, dt=inf NaN observations)."""
    with pytest.raises(ConfigError, match=f"env.params: {param.split('=')[0]} must be finite"):
        make_configured_jax_env(EnvConfig("Pendulum-v1", params=(param,)))
