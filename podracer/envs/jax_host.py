"""A JAX environment stepped on the host, as a Sebulba `HostEnv` (backend "jax").

Any environment of the JAX registry (`podracer.envs.make_jax_env`: the probes, Catch,
gymnax ids, user environments) then also runs under Sebulba: a batch of `num_envs` copies is
reset and stepped by one jitted, vmapped program, and the results come back to the host as
NumPy, with the JAX environments' own semantics (auto-reset, `final_obs`, truncation by their
time limit, or `EnvConfig.max_episode_steps` where set). Observations keep their pytree
structure (`MaskedObs` for environments with legal-action masks). Meant for tests and small
tasks: an environment written in JAX is faster under Anakin.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from podracer.config import EnvConfig
from podracer.envs import make_configured_jax_env
from podracer.envs.base import step_batch
from podracer.envs.host import HostStep


def _jax_env(env_config: EnvConfig) -> Any:
    """The JAX environment with `env_config.params` set (`observe` is the host wrapper's)."""
    return make_configured_jax_env(dataclasses.replace(env_config, observe=()))


def jax_host_specs(env_config: EnvConfig) -> tuple[Any, Any]:
    env = _jax_env(env_config)
    return env.observation_spec(env.default_params), env.action_spec(env.default_params)


class JaxHostEnv:
    """`num_envs` copies of a JAX environment; `send` records the action, `recv` steps."""

    def __init__(self, env_config: EnvConfig, num_envs: int, seed: int) -> None:
        env = _jax_env(env_config)
        params = env.default_params
        self.num_envs = num_envs
        self.observation_spec, self.action_spec = env.observation_spec(params), env.action_spec(params)

        def reset(key):
            key, reset_key = jax.random.split(key)
            state, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)
            return key, state, obs

        def step(key, state, action):
            key, step_key = jax.random.split(key)
            keys = jax.random.split(step_key, num_envs)
            return (key, *step_batch(env, keys, state, action, params))

        self._reset, self._step = jax.jit(reset), jax.jit(step)
        self._key = jax.random.key(seed)
        self._state: Any = None
        self._action: np.ndarray | None = None

    def reset(self) -> Any:
        self._key, self._state, obs = self._reset(self._key)
        return jax.device_get(obs)

    def send(self, action: np.ndarray) -> None:
        self._action = np.asarray(action)

    def recv(self) -> HostStep:
        if self._action is None or self._state is None:
            raise RuntimeError("recv() without a reset() and a send()")
        self._key, self._state, timestep = self._step(self._key, self._state, self._action)
        self._action = None
        timestep = jax.device_get(timestep)
        return HostStep(timestep, np.asarray(timestep.terminated | timestep.truncated))

    def close(self) -> None:
        self._state = None
