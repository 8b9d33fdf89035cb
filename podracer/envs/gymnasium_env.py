"""Any Gymnasium environment (Discrete or Box actions) as a podracer `HostEnv` (fallback).

A `gymnasium.vector.SyncVectorEnv` in same-step auto-reset mode: when an episode ends,
the step already returns the next episode's first observation and the last one is in
`info["final_obs"]`, which is exactly the TimeStep's `obs` / `final_obs`. Truncation comes
from our own step count (the same limit is given to Gymnasium's TimeLimit, so both agree).
`send` only records the action; `recv` steps the batch in the calling thread.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
from gymnasium.error import DependencyNotInstalled
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from podracer.config import EnvConfig
from podracer.envs.host import EpisodeCounters, HostStep, env_action, host_observation, specs_of_spaces
from podracer.types import ActionSpec, DiscreteSpec, ObsSpec, TimeStep


def gymnasium_ids() -> tuple[str, ...]:
    """Every registered Gymnasium id, read live: ids registered at run time count too."""
    return tuple(gymnasium.registry)


def _make_one(env_config: EnvConfig):
    """One Gymnasium environment; an id whose extra is missing (Box2D's LunarLander-v3) raises
    ImportError, as a missing library does elsewhere (Gymnasium's own error is no ImportError)."""
    try:
        return gymnasium.make(env_config.id, max_episode_steps=env_config.max_episode_steps)
    except DependencyNotInstalled as error:
        raise ImportError(str(error)) from error


def gymnasium_specs(env_config: EnvConfig) -> tuple[ObsSpec, ActionSpec]:
    env = _make_one(env_config)
    try:
        return _specs_of(env.observation_space, env.action_space, env_config.id)
    finally:
        env.close()


def _specs_of(obs_space, action_space, env_id: str) -> tuple[ObsSpec, ActionSpec]:
    return specs_of_spaces(obs_space, action_space, env_id)


class GymnasiumEnv:
    """`num_envs` Gymnasium environments stepped one after the other on the host."""

    def __init__(self, env_config: EnvConfig, num_envs: int, seed: int) -> None:
        self.num_envs = num_envs
        self._seed = seed
        self._envs = SyncVectorEnv(
            [functools.partial(_make_one, env_config) for _ in range(num_envs)],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        self.observation_spec, self.action_spec = _specs_of(
            self._envs.single_observation_space, self._envs.single_action_space, env_config.id
        )
        self._obs_space = self._envs.single_observation_space
        space_dtype = getattr(self._envs.single_action_space, "dtype", None)
        self._action_dtype = np.dtype(np.float32 if space_dtype is None else space_dtype)
        # Agents act in 0 .. n - 1; a `Discrete(n, start=s)` space takes s .. s + n - 1.
        self._action_start = int(getattr(self._envs.single_action_space, "start", 0)) \
            if isinstance(self.action_spec, DiscreteSpec) else 0
        spec = self._envs.envs[0].spec
        self._max_steps = env_config.max_episode_steps or (spec.max_episode_steps if spec else None)
        self._counters = EpisodeCounters(num_envs, self._max_steps)
        self._action: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        self._counters = EpisodeCounters(self.num_envs, self._max_steps)
        obs, _ = self._envs.reset(seed=self._seed)
        return self._cast(obs)

    def send(self, action: np.ndarray) -> None:
        self._action = env_action(action, self.action_spec, self._action_dtype)
        if self._action_start:
            self._action = self._action + self._action_start

    def recv(self) -> HostStep:
        if self._action is None:
            raise RuntimeError("recv() without a send()")
        obs, reward, terminated, gym_truncated, info = self._envs.step(self._action)
        self._action = None
        reward = np.asarray(reward, np.float32)
        terminated = np.asarray(terminated, bool)
        truncated, episode_end, episode_return, episode_length = self._counters.step(
            reward, terminated, terminated
        )
        # A limit of Gymnasium's own that we did not count still truncates.
        extra = np.asarray(gym_truncated, bool) & ~terminated & ~truncated
        truncated, episode_end = self._counters.end(extra, truncated, episode_end)
        obs = self._cast(obs)
        final_obs = obs
        ended = info.get("_final_obs")
        if ended is not None and ended.any():
            final_obs = obs.copy()
            for i in np.flatnonzero(ended):
                final_obs[i] = self._cast(np.asarray(info["final_obs"][i]))
        timestep = TimeStep(obs, reward, terminated, truncated, final_obs, episode_return, episode_length)
        return HostStep(timestep, episode_end)

    def close(self) -> None:
        self._envs.close()

    def _cast(self, obs: np.ndarray) -> np.ndarray:
        return host_observation(obs, self._obs_space, self.observation_spec.dtype)
