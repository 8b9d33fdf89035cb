"""The JAX environment protocol (Anakin): pure, keyed, auto-resetting, gymnax 1.0 style.

An environment implements the raw dynamics (`reset_env`, `step_env` that reports only true
termination) and inherits `reset`/`step`, which add what every learner relies on and what
is easy to get wrong when each environment does it by itself:

- auto-reset, with the final observation of the episode that ended kept in the TimeStep;
- continuous actions (a `BoxSpec`) clipped to the box before `step_env` sees them (what
  Gymnasium's `ClipAction` does): a Gaussian policy's sample may lie outside it;
- truncation by a time limit computed from elapsed steps, never mixed with termination;
- running episode return and length for logging.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from podracer.types import ActionSpec, Array, BoxSpec, DiscreteSpec, ObservationSpec, PRNGKey, TimeStep


@struct.dataclass
class EnvState:
    """Wrapper state: the environment's own state plus the bookkeeping of `JaxEnv.step`."""

    inner: Any
    time: Array  # int32: steps taken in the current episode
    episode_return: Array  # float32: undiscounted return so far


class JaxEnv:
    """Base class of JAX environments. Subclasses implement the raw dynamics.

    `params` is an environment-specific pytree (or None); `default_params` supplies it.
    Observation dtypes are whatever the environment produces (float32 or uint8). An
    environment with legal-action masks returns `MaskedObs(obs, action_mask)` observations
    and a `MaskedObs` of `ObsSpec`s as its observation spec (`podracer.types.masked_obs_spec`).
    """

    name: str = "env"

    @property
    def default_params(self) -> Any:
        return None

    # --- to implement -----------------------------------------------------------------
    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Array]:
        """Start an episode: `(inner_state, obs)`."""
        raise NotImplementedError

    def step_env(
        self, key: PRNGKey, state: Any, action: Array, params: Any
    ) -> tuple[Any, Array, Array, Array]:
        """One transition: `(inner_state, obs, reward, terminated)`; no time limit here."""
        raise NotImplementedError

    def max_episode_steps(self, params: Any) -> int:
        """Time limit: an episode is truncated after this many steps."""
        raise NotImplementedError

    def own_truncation(self, state: Any, params: Any) -> Array:
        """Whether the environment itself cut its episode short at `state` (its inner state
        after `step_env`), besides the time limit: a wrapped library's own truncation
        (`podracer.envs.wrappers`). `bool []`; False unless overridden."""
        return jnp.zeros((), jnp.bool_)

    def observation_spec(self, params: Any) -> ObservationSpec:
        """An `ObsSpec`, or a pytree of them shaped like the observations (`MaskedObs`)."""
        raise NotImplementedError

    def action_spec(self, params: Any) -> ActionSpec:
        """A `DiscreteSpec`, or a `BoxSpec` for continuous actions (static: not traced)."""
        raise NotImplementedError

    # --- provided ---------------------------------------------------------------------
    def reset(self, key: PRNGKey, params: Any = None) -> tuple[EnvState, Array]:
        params = self.default_params if params is None else params
        inner, obs = self.reset_env(key, params)
        return EnvState(inner, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)), obs

    def step(
        self, key: PRNGKey, state: EnvState, action: Array, params: Any = None
    ) -> tuple[EnvState, TimeStep]:
        """Step, then reset if the episode ended. Not batched: `vmap` it, or use
        `step_batch`, which resets only when some episode of the batch ended."""
        params = self.default_params if params is None else params
        state, timestep = self.step_without_reset(key, state, action, params)
        return self.reset_where_done(key, state, timestep, params)

    def step_without_reset(
        self, key: PRNGKey, state: EnvState, action: Array, params: Any
    ) -> tuple[EnvState, TimeStep]:
        """The first half of `step`: the transition and its bookkeeping (time limit, return;
        the time and return already restarted if the episode ended), its observation kept
        as `obs`. `step_env` gets the first half of `split(key)`, a reset the second."""
        step_key = jax.random.split(key)[0]
        action = clip_action(action, self.action_spec(params))
        inner, obs, reward, terminated = self.step_env(step_key, state.inner, action, params)
        reward = jnp.asarray(reward, jnp.float32)
        terminated = jnp.asarray(terminated, jnp.bool_)
        time = state.time + 1
        truncated = ((time >= self.max_episode_steps(params)) | self.own_truncation(inner, params)) & ~terminated
        done = terminated | truncated
        episode_return = state.episode_return + reward
        next_state = EnvState(
            inner=inner,
            time=jnp.where(done, 0, time),
            episode_return=jnp.where(done, 0.0, episode_return),
        )
        timestep = TimeStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=obs,
            episode_return=episode_return,
            episode_length=time,
        )
        return next_state, timestep

    def reset_where_done(
        self, key: PRNGKey, state: EnvState, timestep: TimeStep, params: Any
    ) -> tuple[EnvState, TimeStep]:
        """The second half of `step` (`key` is the step's): if the episode ended, a new one's
        inner state and first observation replace the final ones (which `timestep.final_obs`
        keeps). The key is split here, not in `step_without_reset`, so that a batch that
        resets nothing (`step_batch`) splits no key for a deterministic environment."""
        done = timestep.terminated | timestep.truncated
        reset_inner, reset_obs = self.reset_env(jax.random.split(key)[1], params)
        inner = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_inner, state.inner)
        # obs may be a pytree (MaskedObs)
        obs = jax.tree.map(lambda r, o: jnp.where(done, r, o), reset_obs, timestep.obs)
        return state.replace(inner=inner), timestep._replace(obs=obs)


def example_action(action_spec: ActionSpec) -> jax.ShapeDtypeStruct:
    """The shape and dtype of one (unbatched) action of `action_spec`: `int32 []` for a
    `DiscreteSpec`, `float32 [*shape]` for a `BoxSpec`."""
    if isinstance(action_spec, DiscreteSpec):
        return jax.ShapeDtypeStruct((), np.int32)
    return jax.ShapeDtypeStruct(tuple(action_spec.shape), np.float32)


def step_batch(
    env: JaxEnv, keys: PRNGKey, state: EnvState, action: Array, params: Any = None
) -> tuple[EnvState, TimeStep]:
    """`jax.vmap(env.step)` over a batch (`keys [B]`, `state` and `action` with `[B]`
    leading), with the same outputs, but on CPU the batch's resets computed only when some
    episode of it ended: a reset draws a random initial state (a threefry loop), which
    otherwise costs more than a step of a simple environment, at every step, to be thrown
    away. When some episode ended, every environment's reset is computed and the ended
    ones' are kept, as in `step`. On other backends, and for an environment that overrides
    `step` itself, it is `vmap(env.step)`: there a loop whose condition depends on the data
    would wait on the host at every step, for a reset that costs little.

    Inside `shard_map`, use it with `check_vma=False` (Anakin's program): environment code is
    third-party code that device-variance typing rejects (a `lax.cond` with a constant
    branch, keys chosen across branches, gymnax's MinAtar `while_loop`s from constants)."""
    def batched(fn):  # over the batch, params shared
        return jax.vmap(fn, in_axes=(0, 0, 0, None))

    params = env.default_params if params is None else params
    if type(env).step is not JaxEnv.step or jax.default_backend() != "cpu":
        return batched(env.step)(keys, state, action, params)
    reset_where_done = batched(env.reset_where_done)
    state, timestep = batched(env.step_without_reset)(keys, state, action, params)

    # A loop that runs its body at most once: `lax.cond` fails under vmap in shard_map.
    def reset(carry):
        ended, state, timestep = carry
        return (jnp.zeros_like(ended), *reset_where_done(keys, state, timestep, params))

    ended = jnp.any(timestep.terminated | timestep.truncated)
    _, state, timestep = jax.lax.while_loop(lambda carry: carry[0], reset, (ended, state, timestep))
    return state, timestep


class JaxEnvWrapper(JaxEnv):
    """`env` unchanged: every part of the protocol delegated to it, and every other
    attribute (`render`, `render_fps`, ...: the inner state is the environment's own). A
    wrapper overrides what it changes."""

    def __init__(self, env: JaxEnv) -> None:
        self.env, self.name = env, env.name

    def __getattr__(self, name: str) -> Any:  # render, render_fps, ...: the environment's own
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Array]:
        return self.env.reset_env(key, params)

    def step_env(self, key: PRNGKey, state: Any, action: Array, params: Any) -> tuple[Any, Array, Array, Array]:
        return self.env.step_env(key, state, action, params)

    def max_episode_steps(self, params: Any) -> int:
        return self.env.max_episode_steps(params)

    def own_truncation(self, state: Any, params: Any) -> Array:
        return self.env.own_truncation(state, params)

    def observation_spec(self, params: Any) -> ObservationSpec:
        return self.env.observation_spec(params)

    def action_spec(self, params: Any) -> ActionSpec:
        return self.env.action_spec(params)


class TimeLimitJaxEnv(JaxEnvWrapper):
    """`env` truncated after `max_steps` steps (`EnvConfig.max_episode_steps`) instead of its
    own time limit; dynamics, specs and rendering unchanged."""

    def __init__(self, env: JaxEnv, max_steps: int) -> None:
        super().__init__(env)
        self._max_steps = max_steps

    def max_episode_steps(self, params: Any) -> int:
        return self._max_steps


def clip_action(action: Array, spec: ActionSpec) -> Array:
    """A continuous action clipped to its box (elementwise); a discrete one unchanged."""
    if not isinstance(spec, BoxSpec):
        return action
    action = jnp.asarray(action, jnp.float32)
    return jnp.clip(action, jnp.asarray(spec.low, jnp.float32), jnp.asarray(spec.high, jnp.float32))
