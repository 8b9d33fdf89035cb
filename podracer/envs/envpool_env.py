"""EnvPool's C++ batched environments as a podracer `HostEnv` (the NumPy path, not `xla()`).

EnvPool runs in synchronous batch mode (`batch_size == num_envs`) and is driven with
`send(action, env_id)` / `recv()`. Two of its behaviours are hidden here:

- **Next-step auto-reset.** After an episode ends, EnvPool resets that environment on the
  *next* `send`, ignoring the action and returning the first observation with reward 0
  (checked for CartPole-v1 and Atari: `elapsed_step` is 0 on that step). That is not a
  transition, so `recv` resets the environments that just finished at once, with one
  extra step of just those ids (`_restart`), and reports the new observation in the same
  step, as the JAX environments do. The learner never sees a fake step. (An explicit
  `reset(env_ids)` would not do: it restarts an Atari game even with lives left.)
- **Time limits.** Whether a step is truncated is computed from our own step count
  (`EpisodeCounters`), and an environment we truncate is reset explicitly: EnvPool's
  `truncated` is unreliable (sail-sg/envpool#239), and on the step that reaches its own
  limit it reports `terminated = False` even where the episode did end in a terminal
  state (CartPole's pole down at step 500). So EnvPool's limit is set one step beyond
  ours, where it never ends an episode first.

Atari observations arrive as `[B, stack, 84, 84]` and are handed on as `[B, 84, 84, stack]`
uint8 (the CNN torsos' layout). Episode returns are logged from the unclipped reward
(`info["reward"]`) and, with episodic life, per game (`info["terminated"]`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from podracer.config import EnvConfig
from podracer.envs.host import EpisodeCounters, HostStep, env_action, host_observation, specs_of_spaces
from podracer.types import ActionSpec, BoxSpec, ObsSpec, TimeStep

# EnvPool is an optional extra (`envpool`): imported where used, so this module imports without it.
INT32_MAX = 2**31 - 1  # EnvPool's largest time limit


@functools.cache
def envpool_ids() -> tuple[str, ...]:
    """Every id EnvPool registers; empty when EnvPool is not installed."""
    try:
        import envpool
    except ImportError:
        return ()
    return tuple(envpool.list_all_envs())


def _is_atari(spec: Any) -> bool:
    return hasattr(spec.config, "episodic_life")


def envpool_options(env_config: EnvConfig, spec: Any) -> dict[str, Any]:
    """Keyword arguments for `envpool.make`: the time limit (one step beyond ours, see the
    module docstring; EnvPool takes an int32, and ids without a limit of their own, such as
    CliffWalking-v0 and Blackjack-v1, report the largest one), and Atari preprocessing."""
    options: dict[str, Any] = {"max_episode_steps": min(time_limit(env_config) + 1, INT32_MAX)}
    if _is_atari(spec):
        options.update(
            episodic_life=env_config.episodic_life,
            reward_clip=env_config.reward_clip,
            repeat_action_probability=env_config.repeat_action_probability,
            noop_max=max(env_config.noop_max, 1),  # EnvPool samples from [0, noop_max)
            frame_skip=env_config.frame_skip,
            stack_num=env_config.frame_stack,
            img_height=84,
            img_width=84,
            gray_scale=True,
        )
    return options


def time_limit(env_config: EnvConfig) -> int:
    """The episodes' time limit in agent steps: `env.max_episode_steps`, else EnvPool's own
    for the id (Atari: 27000)."""
    if env_config.max_episode_steps is not None:
        return env_config.max_episode_steps
    import envpool

    return int(envpool.make_spec(env_config.id).config.max_episode_steps)


def _spec(env_config: EnvConfig) -> Any:
    import envpool

    base = envpool.make_spec(env_config.id)
    return envpool.make_spec(env_config.id, **envpool_options(env_config, base))


def _specs_of(spec: Any, env_id: str) -> tuple[ObsSpec, ActionSpec]:
    obs_spec, action_spec = specs_of_spaces(spec.observation_space, spec.action_space, env_id)
    if _is_atari(spec):  # [stack, H, W] -> [H, W, stack]
        shape = obs_spec.shape
        obs_spec = obs_spec._replace(shape=shape[1:] + shape[:1])
    return obs_spec, action_spec


def envpool_specs(env_config: EnvConfig) -> tuple[ObsSpec, ActionSpec]:
    return _specs_of(_spec(env_config), env_config.id)


class EnvPoolEnv:
    """`num_envs` EnvPool environments; see the module docstring for the semantics."""

    def __init__(self, env_config: EnvConfig, num_envs: int, seed: int, num_threads: int = 0) -> None:
        import envpool

        spec = _spec(env_config)
        self.num_envs = num_envs
        self.observation_spec, self.action_spec = _specs_of(spec, env_config.id)
        self._atari = _is_atari(spec)
        # Atari: the observation's last axis stacks this many grayscale frames (not colours)
        self.frame_stack: int | None = env_config.frame_stack if self._atari else None
        self._episodic_life = self._atari and env_config.episodic_life
        self._pool = envpool.make(
            env_config.id, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs,
            num_threads=num_threads, seed=seed, **envpool_options(env_config, spec),
        )
        self._ids = np.arange(num_envs, dtype=np.int32)
        self._action_dtype = np.dtype(spec.action_space.dtype)
        self._counters = EpisodeCounters(num_envs, time_limit(env_config))
        self._obs_dtype = self.observation_spec.dtype
        self._obs_space = spec.observation_space

    def reset(self) -> np.ndarray:
        self._counters = EpisodeCounters(self.num_envs, self._counters.max_steps)
        obs, info = self._pool.reset(self._ids)
        return self._observation(obs, info["env_id"])

    def send(self, action: np.ndarray) -> None:
        self._pool.send(env_action(action, self.action_spec, self._action_dtype), self._ids)

    def recv(self) -> HostStep:
        obs, reward, terminated, pool_truncated, info = self._pool.recv()
        order = np.argsort(info["env_id"])
        obs = self._observation(obs, info["env_id"])
        reward = np.asarray(reward, np.float32)[order]
        terminated = np.asarray(terminated, bool)[order]
        pool_done = terminated | np.asarray(pool_truncated, bool)[order]
        raw_reward = np.asarray(info["reward"], np.float32)[order] if self._atari else reward
        game_over = terminated & (np.asarray(info["terminated"], bool)[order] if self._episodic_life else True)
        truncated, episode_end, episode_return, episode_length = self._counters.step(
            raw_reward, terminated, game_over
        )
        # A limit of EnvPool's own that we did not count still truncates.
        truncated, episode_end = self._counters.end(pool_done & ~terminated & ~truncated, truncated, episode_end)
        final_obs = obs
        done = terminated | truncated
        if done.any():
            obs = obs.copy()
            obs[done] = self._restart(done, pool_done)
        timestep = TimeStep(obs, reward, terminated, truncated, final_obs, episode_return, episode_length)
        return HostStep(timestep, episode_end)

    def close(self) -> None:
        self._pool.close()

    def _restart(self, done: np.ndarray, pool_done: np.ndarray) -> np.ndarray:
        """First observations of the environments whose episode just ended (`done [B]`).

        Those EnvPool also saw end are stepped once now with a dummy action, which is
        what its auto-reset does with the next action anyway: with episodic life and lives
        left the game goes on, otherwise a new game starts. Those only we truncated are
        reset explicitly, which always starts a new game.
        """
        obs = np.empty((int(done.sum()),) + self.observation_spec.shape, self._obs_dtype)
        auto = pool_done[done]
        if auto.any():
            ids = np.flatnonzero(done & pool_done).astype(np.int32)
            self._pool.send(self._dummy_action(len(ids)), ids)
            reset_obs, *_, info = self._pool.recv()
            obs[auto] = self._observation(reset_obs, info["env_id"])
        if not auto.all():
            ids = np.flatnonzero(done & ~pool_done).astype(np.int32)
            reset_obs, info = self._pool.reset(ids)
            obs[~auto] = self._observation(reset_obs, info["env_id"])
        return obs

    def _dummy_action(self, n: int) -> np.ndarray:
        """An action for `n` environments that EnvPool will ignore (it resets them)."""
        if isinstance(self.action_spec, BoxSpec):
            return np.zeros((n,) + self.action_spec.shape, self._action_dtype)
        return np.zeros(n, np.int32)

    def _observation(self, obs: np.ndarray, env_id: np.ndarray) -> np.ndarray:
        """Sort by env id; Atari frames `[B, stack, H, W] -> [B, H, W, stack]`; state
        indices (`Discrete` observations) one-hot."""
        if not np.array_equal(env_id, np.sort(env_id)):
            obs = obs[np.argsort(env_id)]
        if self._atari:
            obs = np.ascontiguousarray(obs.transpose(0, 2, 3, 1))
        return host_observation(obs, self._obs_space, self._obs_dtype)
