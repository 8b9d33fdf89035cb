"""Any gymnax-API or dm_env/Jumanji-style JAX environment object as a podracer `JaxEnv`.

- `GymnaxAPIEnv(env, ...)`: an object with gymnax's methods, `reset(key, params) -> (obs,
  state)`, `step(key, state, action, params) -> (obs, state, reward, done, info)`,
  `default_params`, `action_space(params)` (Craftax, gymnax environments of other packages).
- `TimeStepEnv(env, ...)`: an object with `reset(key) -> (state, timestep)` and
  `step(state, action) -> (state, timestep)`, the timestep a dm_env `TimeStep` (`step_type`,
  `reward`, `discount`, `observation`): Jumanji's environments.

Both keep termination and truncation apart, as `JaxEnv` does: the wrapped environment's own
truncation (a last step with discount > 0, or a `truncation` rule for a gymnax `done` that
includes a time limit) is reported as `truncated`, and the time limit (`max_episode_steps`,
given or read from the parameters) truncates as for every `JaxEnv`. Observation specs come
from `jax.eval_shape` of a reset (nothing runs); action specs from the environment's
discrete or box space (`action_spec_of`). Observations may be arrays or dicts/NamedTuples
of arrays; a field named as in `MASK_FIELDS` becomes a `MaskedObs` legal-action mask in
`podracer.envs.make_configured_jax_env` (`podracer.envs.structured.masked_from_field`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from podracer.envs.base import JaxEnv
from podracer.types import ActionSpec, Array, DiscreteSpec, ObservationSpec, ObsSpec, PRNGKey, box_spec

# (env_state, info, params) -> bool []: True where gymnax's `done` is a truncation
Truncation = Callable[[Any, dict, Any], Array]


@struct.dataclass
class WrappedState:
    """The inner state of a wrapped environment: its own state, the steps of the current
    episode and whether its last step was its own truncation."""

    env_state: Any
    steps: Array  # int32 []
    truncated: Array  # bool []


def observation_spec_of(reset: Callable[[PRNGKey], Any]) -> ObservationSpec:
    """The observation spec (a pytree of `ObsSpec` shaped like the observations) of the
    observations `reset(key)` returns, traced with `jax.eval_shape` (nothing runs).

    Args:
      reset: `key -> obs`, one environment's first observation (an array or a pytree).
    Returns:
      An `ObsSpec`, or a pytree of them with the observation's structure.
    """
    obs = jax.eval_shape(reset, jax.random.key(0))
    return jax.tree.map(lambda leaf: ObsSpec(tuple(leaf.shape), np.dtype(leaf.dtype)), obs)


def action_spec_of(space: Any) -> ActionSpec:
    """A podracer action spec from a library's action space or spec: a `DiscreteSpec` for a
    discrete one (gymnax's `Discrete`, Jumanji's `DiscreteArray`, navix's `Discrete`), a
    `BoxSpec` for a bounded float box (gymnax's `Box`, Jumanji's `BoundedArray`).

    Args:
      space: the environment's action space (gymnax, dm_env/Jumanji or navix style).
    Returns:
      `DiscreteSpec(n)` or `BoxSpec(shape, low, high)`; ValueError for any other space
      (multi-discrete, unbounded).
    """
    for count in ("num_values", "n", "num_categories"):
        n = getattr(space, count, None)
        if n is not None and np.ndim(n) == 0:
            return DiscreteSpec(int(n))
    shape = tuple(getattr(space, "shape", (None,)))
    dtype = np.dtype(getattr(space, "dtype", np.float32))
    low = getattr(space, "low", getattr(space, "minimum", None))
    high = getattr(space, "high", getattr(space, "maximum", None))
    if low is not None and high is not None and np.issubdtype(dtype, np.integer) and shape == ():
        return DiscreteSpec(int(np.asarray(high)) - int(np.asarray(low)) + 1)  # navix's Discrete(minimum, maximum)
    if low is not None and high is not None and np.issubdtype(dtype, np.floating) and None not in shape:
        return box_spec(shape, np.asarray(low), np.asarray(high))
    raise ValueError(f"action space {space!r} is neither discrete nor a bounded box")


class WrappedJaxEnv(JaxEnv):
    """What both wrappers share: a `WrappedState` inner state, the wrapped environment's
    own truncations reported as `truncated` (besides the time limit), specs by tracing.
    Subclasses implement `_reset(key, params) -> (env_state, obs)` and `_step(key, state,
    action, params) -> (env_state, obs, reward, done, truncated)` (`state` the
    `WrappedState` before the step; a `done` that is a truncation is not a termination)."""

    def __init__(self, env: Any, params: Any, max_episode_steps: int | None, name: str) -> None:
        self.env, self.name, self._params, self._max_steps = env, name, params, max_episode_steps

    @property
    def default_params(self) -> Any:
        return self._params

    def replace_params(self, params: Any) -> None:
        """Use `params` from now on (`podracer.envs.params`, `--env.params`)."""
        self._params = params

    def _reset(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def _step(self, key: PRNGKey, state: WrappedState, action: Array,
              params: Any) -> tuple[Any, Any, Array, Array, Array]:
        raise NotImplementedError

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[WrappedState, Any]:
        env_state, obs = self._reset(key, params)
        return WrappedState(env_state, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.bool_)), obs

    def step_env(self, key: PRNGKey, state: WrappedState, action: Array,
                 params: Any) -> tuple[WrappedState, Any, Array, Array]:
        env_state, obs, reward, done, truncated = self._step(key, state, action, params)
        truncated = jnp.asarray(truncated, jnp.bool_)
        terminated = jnp.asarray(done, jnp.bool_) & ~truncated
        return WrappedState(env_state, state.steps + 1, truncated), obs, reward, terminated

    def own_truncation(self, state: WrappedState, params: Any) -> Array:
        """The wrapped environment's own truncation at its last step."""
        return state.truncated

    def max_episode_steps(self, params: Any) -> int:
        if self._max_steps is not None:
            return self._max_steps
        return params.max_steps_in_episode

    def observation_spec(self, params: Any) -> ObservationSpec:
        """The shapes and dtypes `reset_env` returns (`observation_spec_of`)."""
        return observation_spec_of(lambda key: self._reset(key, params)[1])


class GymnaxAPIEnv(WrappedJaxEnv):
    """A gymnax-API environment object as a `JaxEnv`, e.g. Craftax's:

        env = GymnaxAPIEnv(make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False),
                           max_episode_steps=10_000, truncation="time_limit")

    It steps with the environment's non-resetting `step_env` where it has one (gymnax's
    `Environment`), else with its `step`, which must then not reset by itself (a gymnax
    `step` returns the next episode's first observation, and the final one would be lost).

    Args (of the constructor):
      env: the environment object (`reset_env`/`reset`, `step_env`/`step`, `action_space`).
      params: its parameters; None for `env.default_params`.
      max_episode_steps: the time limit; None for the parameters' `max_steps_in_episode`.
      truncation: which `done` is a truncation rather than a termination: None (every
        `done` terminates), "time_limit" (a `done` at `max_episode_steps` steps is a
        truncation: a `done` that includes the time limit, as Craftax's), or a callable
        `(env_state, info, params) -> bool []` evaluated after the step.
      name: the name shown in logs and errors.
    """

    def __init__(self, env: Any, params: Any = None, max_episode_steps: int | None = None,
                 truncation: None | str | Truncation = None, name: str | None = None) -> None:
        if truncation is not None and truncation != "time_limit" and not callable(truncation):
            raise ValueError(f"truncation must be None, 'time_limit' or a callable, got {truncation!r}")
        params = env.default_params if params is None else params
        super().__init__(env, params, max_episode_steps, name or type(env).__name__)
        self._truncation = truncation
        if max_episode_steps is None and getattr(params, "max_steps_in_episode", None) is None:
            raise ValueError(f"{self.name}: no time limit; pass max_episode_steps (its parameters have no "
                             "max_steps_in_episode)")

    def _reset(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        reset = getattr(self.env, "reset_env", None) or self.env.reset
        obs, env_state = reset(key, params)
        return env_state, obs

    def _step(self, key: PRNGKey, state: WrappedState, action: Array,
              params: Any) -> tuple[Any, Any, Array, Array, Array]:
        step = getattr(self.env, "step_env", None) or self.env.step
        obs, env_state, reward, done, info = step(key, state.env_state, action, params)
        done = jnp.asarray(done, jnp.bool_)
        if self._truncation is None:
            truncated = jnp.zeros((), jnp.bool_)
        elif self._truncation == "time_limit":
            truncated = done & (state.steps + 1 >= self.max_episode_steps(params))
        else:
            truncated = done & jnp.asarray(self._truncation(env_state, info, params), jnp.bool_)
        return env_state, obs, reward, done, truncated

    def action_spec(self, params: Any) -> ActionSpec:
        # static: from the wrapper's own (concrete) parameters
        return action_spec_of(self.env.action_space(self._params))


def _is_last(timestep: Any) -> Array:
    """dm_env's `StepType.LAST` (2) of a `TimeStep`."""
    return jnp.asarray(timestep.step_type) == 2


class TimeStepEnv(WrappedJaxEnv):
    """A dm_env/Jumanji-style environment object as a `JaxEnv`, e.g. Jumanji's:

        env = TimeStepEnv(jumanji.make("Snake-v1"))

    Its `reset(key) -> (state, timestep)` and `step(state, action) -> (state, timestep)` must
    not reset by themselves (Jumanji's environments without `AutoResetWrapper`). A last step
    (`step_type == LAST`) with `discount == 0` is a termination, one with `discount > 0` a
    truncation. The observation is `timestep.observation`; the step's key is not used (a
    Jumanji environment keeps its keys in its state).

    Args (of the constructor):
      env: the environment object (`reset`, `step`, `action_spec`, a property or a method).
      max_episode_steps: the time limit; None for the environment's `time_limit` attribute.
      name: the name shown in logs and errors.
    """

    def __init__(self, env: Any, max_episode_steps: int | None = None, name: str | None = None) -> None:
        limit = max_episode_steps if max_episode_steps is not None else getattr(env, "time_limit", None)
        if limit is None:
            raise ValueError(f"{name or type(env).__name__}: no time limit; pass max_episode_steps")
        super().__init__(env, None, int(limit), name or type(env).__name__)

    def _reset(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        env_state, timestep = self.env.reset(key)
        return env_state, timestep.observation

    def _step(self, key: PRNGKey, state: WrappedState, action: Array,
              params: Any) -> tuple[Any, Any, Array, Array, Array]:
        env_state, timestep = self.env.step(state.env_state, action)
        last = _is_last(timestep)
        return env_state, timestep.observation, timestep.reward, last, last & (jnp.asarray(timestep.discount) > 0)

    def action_spec(self, params: Any) -> ActionSpec:
        spec = self.env.action_spec
        return action_spec_of(spec() if callable(spec) else spec)
