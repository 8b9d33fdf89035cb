"""Partial observability on request: keep only some entries of a vector observation.

`EnvConfig.observe = (0, 2)` (`--env.observe 0,2` on the command line) makes any environment
with vector observations `[D]` show the agent only those entries, in that order: CartPole
without its velocities is `observe = (0, 2)`. The same selection applies to JAX environments
(Anakin, `evaluate`) and host environments (Sebulba), to every observation the agent sees:
after a reset, after a step, and the final observation of an episode that ended (which a
truncated episode bootstraps from).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from podracer.config import ConfigError
from podracer.envs.base import JaxEnv, JaxEnvWrapper
from podracer.envs.host import HostEnv, HostStep, env_metrics
from podracer.types import ObsSpec


def observed_spec(spec: Any, observe: tuple[int, ...], env_id: str) -> ObsSpec:
    """The spec of the selected entries; ConfigError naming `env.observe` unless `spec` is
    one `ObsSpec` of shape `[D]` and every index is in `[0, D)`."""
    if not isinstance(spec, ObsSpec) or len(spec.shape) != 1:
        shape = spec.shape if isinstance(spec, ObsSpec) else type(spec).__name__
        raise ConfigError(f"env.observe selects entries of vector observations; {env_id} observes {shape}")
    size = spec.shape[0]
    bad = [i for i in observe if not 0 <= i < size]
    if bad:
        raise ConfigError(f"env.observe indices must be in [0, {size}) for {env_id}, got {list(observe)}")
    return ObsSpec((len(observe),), spec.dtype)


class ObservedJaxEnv(JaxEnvWrapper):
    """`env` with observations `obs[..., observe]`; dynamics, rewards and limits unchanged."""

    def __init__(self, env: JaxEnv, observe: tuple[int, ...], env_id: str) -> None:
        super().__init__(env)
        self._spec = observed_spec(env.observation_spec(env.default_params), observe, env_id)
        self._index = np.asarray(observe, np.int32)

    def _select(self, obs: Any) -> Any:
        return jnp.take(obs, self._index, axis=-1)

    def reset_env(self, key, params):
        inner, obs = self.env.reset_env(key, params)
        return inner, self._select(obs)

    def step_env(self, key, state, action, params):
        inner, obs, reward, terminated = self.env.step_env(key, state, action, params)
        return inner, self._select(obs), reward, terminated

    def observation_spec(self, params: Any) -> ObsSpec:
        return self._spec


class ObservedHostEnv:
    """A `HostEnv` whose observations (and final observations) keep only `observe`."""

    def __init__(self, env: HostEnv, observe: tuple[int, ...], env_id: str) -> None:
        self.env = env
        self.num_envs, self.action_spec = env.num_envs, env.action_spec
        self.observation_spec = observed_spec(env.observation_spec, observe, env_id)
        self._index = np.asarray(observe, np.intp)

    def _select(self, obs: np.ndarray) -> np.ndarray:
        return np.take(np.asarray(obs), self._index, axis=-1)

    def reset(self) -> np.ndarray:
        return self._select(self.env.reset())

    def send(self, action: np.ndarray) -> None:
        self.env.send(action)

    def recv(self) -> HostStep:
        step = self.env.recv()
        timestep = step.timestep._replace(obs=self._select(step.timestep.obs),
                                          final_obs=self._select(step.timestep.final_obs))
        return step._replace(timestep=timestep)

    def metrics(self) -> dict[str, float]:
        return env_metrics(self.env)

    def close(self) -> None:
        self.env.close()
