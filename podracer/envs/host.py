"""Host environments (Sebulba): batched, stepped on the CPU, with the JAX envs' semantics.

A host environment owns `num_envs` environments and is driven by `send(action [B])` then
`recv() -> HostStep`, so an actor can do other work while they step. Every step it
reports is a real transition of every environment: auto-reset happens inside `recv`, the
TimeStep's `obs` is already the first observation of the next episode where one ended, and
`final_obs` is the observation it ended in (as `podracer.envs.base.JaxEnv.step`).

Truncation is computed here, from the number of steps taken since the last reset
(`EpisodeCounters`), never read from the backend's own flag (EnvPool's is wrong with
episodic life, sail-sg/envpool#239).

Continuous actions (a Gymnasium `Box`) are reported as a `BoxSpec`, and `send` clips them
to the box (Gymnasium's `ClipAction`; EnvPool's MuJoCo tasks would otherwise charge their
control cost on the unclipped action). Float observations arrive as float32.

With Atari's episodic life a lost life *terminates* the learner's episode but not the
game: `TimeStep.episode_return/episode_length` then count the whole game, and
`HostStep.episode_end` marks the steps where a game (what gets logged) finished.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from podracer.config import ConfigError, EnvConfig
from podracer.envs.families import host_env_families, host_family_of
from podracer.types import ActionSpec, BoxSpec, DiscreteSpec, ObservationSpec, ObsSpec, TimeStep, box_spec


class HostStep(NamedTuple):
    """What `HostEnv.recv` returns; NumPy arrays, `[B, ...]`.

    timestep:    the JAX-env TimeStep (auto-reset applied, truncation from elapsed steps).
    episode_end: a logged episode (a whole game, for Atari with episodic life) finished on
                 this step; its totals are `timestep.episode_return/episode_length`.
    """

    timestep: TimeStep
    episode_end: np.ndarray


class HostEnv(Protocol):
    """A batch of host environments, stepped asynchronously: `send` then `recv`.

    Observations are NumPy arrays `[B, ...]`, or pytrees of them shaped like
    `observation_spec` (`MaskedObs` for environments with legal-action masks)."""

    num_envs: int
    observation_spec: ObservationSpec
    action_spec: ActionSpec

    def reset(self) -> Any:
        """Reset every environment: observations `[B, ...]`."""

    def send(self, action: np.ndarray) -> None:
        """Start stepping every environment with `action [B]` (`[B, *shape]`, clipped to
        the box, for continuous actions); returns at once."""

    def recv(self) -> HostStep:
        """Wait for the step started by `send`."""

    def close(self) -> None:
        """Release the environments (threads, processes)."""

    # Optional: `metrics() -> dict[str, float]`, numbers the environment measures itself,
    # cumulative since it was made (e.g. a pool of reward workers: rewards computed per
    # second, cache hit rate, seconds waited on rewards). Read through `env_metrics`.


def env_metrics(env: Any) -> dict[str, float]:
    """`env.metrics()` where the host environment has that optional method, else `{}`;
    Sebulba's metrics rows report them prefixed `env_` (`sebulba.metrics`)."""
    metrics = getattr(env, "metrics", None)
    return {} if metrics is None else {name: float(value) for name, value in metrics().items()}


def specs_of_spaces(obs_space, action_space, env_id: str) -> tuple[ObsSpec, ActionSpec]:
    """Specs of Gymnasium spaces: `Discrete` -> `DiscreteSpec`, `Box` -> `BoxSpec` (float32
    bounds); float observations are float32 (the JAX default), others keep their dtype,
    except a `Discrete(n)` observation (FrozenLake's, Taxi's state), which agents see one-hot,
    float32 `[n]` (`one_hot_size`). Observations must be one array (`Box`, `Discrete`,
    `MultiBinary`, `MultiDiscrete`): a `Dict` or `Tuple` space raises ValueError naming it."""
    if obs_space.shape is None or obs_space.dtype is None:
        raise ValueError(f"{env_id} has observation space {type(obs_space).__name__}; podracer host environments "
                         "need one array per observation (Box, Discrete, MultiBinary or MultiDiscrete)")
    dtype = np.dtype(obs_space.dtype)
    size = one_hot_size(obs_space)
    if size is not None:
        obs_spec = ObsSpec((size,), np.dtype(np.float32))
    else:
        obs_spec = ObsSpec(tuple(obs_space.shape), np.dtype(np.float32) if dtype.kind == "f" else dtype)
    # `MultiBinary(n)` has an `n` too, and an array shape: a vector of flags, not one choice.
    if hasattr(action_space, "n") and tuple(action_space.shape or ()) == ():
        return obs_spec, DiscreteSpec(int(action_space.n))
    if hasattr(action_space, "low") and hasattr(action_space, "high") and len(action_space.shape) >= 1:
        return obs_spec, box_spec(action_space.shape, action_space.low, action_space.high)
    raise ValueError(f"{env_id} has action space {action_space}; podracer agents need Discrete or Box actions")


def one_hot_size(obs_space: Any) -> int | None:
    """n for a `Discrete(n)` observation space (a state index: a network given the index
    as a number would read an order and a scale into it that are not there), else None."""
    if tuple(getattr(obs_space, "shape", None) or ()) == () and hasattr(obs_space, "n"):
        return int(obs_space.n)
    return None


def one_hot(obs: np.ndarray, obs_space: Any) -> np.ndarray:
    """`float32 [..., n]`: the one-hot of `Discrete(n, start=s)` observations `[...]`
    (ValueError for one outside `s .. s + n - 1`)."""
    n, start = int(obs_space.n), int(getattr(obs_space, "start", 0))
    index = np.asarray(obs, np.int64) - start
    if index.size and (index.min() < 0 or index.max() >= n):
        raise ValueError(f"observation outside its space Discrete({n}, start={start}): {np.asarray(obs).ravel()[:8]}")
    out = np.zeros(index.shape + (n,), np.float32)
    np.put_along_axis(out, index[..., None], 1.0, axis=-1)
    return out


def host_observation(obs: np.ndarray, obs_space: Any, dtype: np.dtype) -> np.ndarray:
    """A backend's observations `[B, ...]` as agents see them (`specs_of_spaces`): state
    indices of a `Discrete(n)` space one-hot, others cast to the spec's `dtype`."""
    if one_hot_size(obs_space) is not None:
        return one_hot(obs, obs_space)
    return np.asarray(obs).astype(dtype, copy=False)


def env_action(action: np.ndarray, spec: ActionSpec, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """An action batch as the backend takes it: int32 for discrete actions; for a box,
    `dtype` and clipped to the bounds."""
    if isinstance(spec, BoxSpec):
        return np.clip(np.asarray(action, dtype), spec.low, spec.high).astype(dtype, copy=False)
    return np.asarray(action, np.int32)


class EpisodeCounters:
    """Per-environment step and return counters, and truncation from elapsed steps.

    `elapsed` counts agent steps since the last full reset (a whole game with episodic
    life); an episode is truncated when it reaches `max_steps` without terminating.
    """

    def __init__(self, num_envs: int, max_steps: int | None) -> None:
        self.max_steps = max_steps
        self.elapsed = np.zeros(num_envs, np.int32)
        self.returns = np.zeros(num_envs, np.float32)

    def step(
        self, raw_reward: np.ndarray, terminated: np.ndarray, game_over: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Count one step: `(truncated, episode_end, episode_return, episode_length)`.

        terminated: the learner's episode ended in a terminal state (a life lost counts).
        game_over:  the logged episode ended in a terminal state (the game is over).
        """
        self.elapsed += 1
        self.returns += raw_reward.astype(np.float32)
        if self.max_steps is None:
            truncated = np.zeros_like(terminated)
        else:
            truncated = (self.elapsed >= self.max_steps) & ~terminated
        episode_end = truncated | game_over
        episode_return, episode_length = self.returns.copy(), self.elapsed.copy()
        self.returns[episode_end] = 0.0
        self.elapsed[episode_end] = 0
        return truncated, episode_end, episode_return, episode_length

    def end(
        self, mask: np.ndarray, truncated: np.ndarray, episode_end: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Also truncate the episodes in `mask` (a backend's own time limit we did not
        count) after `step`: the updated `(truncated, episode_end)`."""
        if mask.any():
            self.returns[mask] = 0.0
            self.elapsed[mask] = 0
        return truncated | mask, episode_end | mask


# The backends below (`envpool_env`, `gymnasium_env`, `jax_host`), `observe` and `podracer.envs`
# itself import this module's protocol at their top, so the functions that choose among them
# import them when called: an import cycle otherwise.


def host_env_ids() -> list[str]:
    """Every id a host environment can be made from: EnvPool's, Gymnasium's, the JAX
    registry's, and the examples of the registered host id families
    (`podracer.envs.families.register_host_env_family`)."""
    from podracer.envs import envpool_env, gymnasium_env, jax_env_ids

    examples = {env_id for family in host_env_families() for env_id in family.examples}
    return sorted(set(envpool_env.envpool_ids()) | set(gymnasium_env.gymnasium_ids()) | set(jax_env_ids()) | examples)


def host_backend(env_config: EnvConfig) -> str:
    """The backend that will run `env_config.id` (`_host_backend`); `env.params` is refused
    for a backend other than "jax" and the id families (which read them as their options)."""
    backend = _host_backend(env_config)
    if env_config.params and backend in ("envpool", "gymnasium"):
        raise ConfigError(f"env.params sets parameters of JAX environments (and the options of id families); "
                          f"{env_config.id} runs on {backend} here (--env.backend jax runs a JAX environment on "
                          "the host)")
    return backend


def _host_backend(env_config: EnvConfig) -> str:
    """The backend that will run `env_config.id`: the name of the registered host id family
    it belongs to (whatever `env.backend` says), else "envpool", "gymnasium" or "jax" (a JAX
    environment stepped on the host, `podracer.envs.jax_host`), the first that has the id.

    Raises UnknownEnvError (listing close matches) when the chosen backend lacks the id,
    naming the `envpool` extra when EnvPool is not installed.
    """
    from podracer.envs import envpool_env, gymnasium_env, jax_env_ids, unknown_env_error

    family = host_family_of(env_config.id)
    if family is not None:
        return family.name
    backend = env_config.backend
    if backend in ("auto", "envpool") and env_config.id in envpool_env.envpool_ids():
        return "envpool"
    if backend in ("auto", "gymnasium") and env_config.id in gymnasium_env.gymnasium_ids():
        return "gymnasium"
    if backend in ("auto", "jax") and env_config.id in jax_env_ids():
        return "jax"
    known = {"envpool": envpool_env.envpool_ids, "gymnasium": gymnasium_env.gymnasium_ids, "jax": jax_env_ids}
    ids = host_env_ids() if backend == "auto" else sorted(known[backend]())
    error = unknown_env_error(env_config.id, ids, "host" if backend == "auto" else backend)
    if backend in ("auto", "envpool") and not envpool_env.envpool_ids():  # none: EnvPool is not installed
        error = type(error)(f"{error} (EnvPool, which runs Atari and MuJoCo, is not installed: "
                            "pip install 'podracer[envpool]')")
    raise error


def host_env_specs(env_config: EnvConfig) -> tuple[ObservationSpec, ActionSpec]:
    """Observation and action specs of a host environment, without building a batch.

    An id family's specs come from its `specs` function (which may raise ConfigError, or a
    ValueError naming what its environments need).
    """
    obs_spec, action_spec = _backend_specs(env_config)
    if env_config.observe:
        from podracer.envs.observe import observed_spec

        obs_spec = observed_spec(obs_spec, env_config.observe, env_config.id)
    return obs_spec, action_spec


def _backend_specs(env_config: EnvConfig) -> tuple[ObservationSpec, ActionSpec]:
    from podracer.envs import envpool_env, gymnasium_env, jax_host

    backend = host_backend(env_config)
    family = host_family_of(env_config.id)
    if family is not None:
        return family.specs(env_config.id, env_config.max_episode_steps, env_config.params)
    if backend == "envpool":
        return envpool_env.envpool_specs(env_config)
    if backend == "jax":
        return jax_host.jax_host_specs(env_config)
    return gymnasium_env.gymnasium_specs(env_config)


def host_env_record(env_config: EnvConfig) -> dict[str, Any] | None:
    """What an environment's rewards depend on beyond its config, for the run directory
    (`experiments.train` writes it to `RUN_DIR/environment.json` and checks it on resume):
    its id family's `record` (the versions of an external tool the environment runs, say);
    None for every other environment.

    Args:
        env_config: the run's environment section.

    Returns:
        A JSON-able dict, or None.
    """
    family = host_family_of(env_config.id)
    return None if family is None or family.record is None else family.record(env_config.id)


def make_host_env(env_config: EnvConfig, num_envs: int, seed: int, num_threads: int = 0) -> HostEnv:
    """A batch of `num_envs` host environments for `env_config` (EnvPool, else Gymnasium).

    num_threads: EnvPool worker threads (0: EnvPool's default); ignored by the others.
    With `env_config.observe`, observations keep only those entries (`podracer.envs.observe`).
    """
    env = _make_backend_env(env_config, num_envs, seed, num_threads)
    if env_config.observe:
        from podracer.envs.observe import ObservedHostEnv

        env = ObservedHostEnv(env, env_config.observe, env_config.id)
    return env


def _make_backend_env(env_config: EnvConfig, num_envs: int, seed: int, num_threads: int) -> HostEnv:
    from podracer.envs import envpool_env, gymnasium_env, jax_host

    backend = host_backend(env_config)
    family = host_family_of(env_config.id)
    if family is not None:
        return family.make(env_config.id, num_envs, seed, env_config.max_episode_steps, env_config.params)
    if backend == "envpool":
        return envpool_env.EnvPoolEnv(env_config, num_envs, seed, num_threads)
    if backend == "jax":
        return jax_host.JaxHostEnv(env_config, num_envs, seed)
    return gymnasium_env.GymnasiumEnv(env_config, num_envs, seed)
