"""Brax environments (`pip install podracer[brax]`) as podracer `JaxEnv`s, for Anakin.

An id is `brax/<name>` (`brax/inverted_pendulum`, `brax/ant`, ...: `BRAX_ENVS`). The adapter
wraps Brax's raw environment (`brax.envs.get_environment`, no Brax wrappers): Brax's
`done` is termination only, and `JaxEnv.step` adds the time limit (1000 steps, Brax's
`episode_length`), truncation and auto-reset, as for every JAX environment. Actions are a
`BoxSpec` in `[-1, 1]` (Brax's convention; `JaxEnv.step` clips to it).

The physics pipeline is Brax's `positional` one (`BraxEnv(name, backend=...)` picks
another, e.g. Brax's default `generalized`, which solves contacts with jaxopt). Checked with
brax 0.14.2 and jax 0.10.2 on a CPU. MuJoCo Playground
(`playground` 0.2.0) also installs against jax 0.10.2 but needs NVIDIA Warp (`warp-lang`);
it is not adapted here.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import jax.numpy as jnp

from podracer.envs.base import JaxEnv
from podracer.types import BoxSpec, ObsSpec

PREFIX = "brax/"
# Brax is an optional extra (`brax`): imported where used, so this module imports without it.
BRAX_ENVS = (
    "ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_double_pendulum",
    "inverted_pendulum", "pusher", "reacher", "swimmer", "walker2d",
)
BRAX_IDS = tuple(PREFIX + name for name in BRAX_ENVS)


def brax_available() -> bool:
    try:
        _import_brax_envs()
    except ImportError:
        return False
    return True


def _import_brax_envs() -> Any:
    # mujoco.mjx prints (not warns) when NVIDIA Warp is missing; keep the console clean.
    with contextlib.redirect_stdout(io.StringIO()):
        from brax import envs
    return envs


class BraxEnv(JaxEnv):
    """A Brax environment by name (`BraxEnv("ant")`), on the `positional` pipeline."""

    def __init__(self, name: str, episode_length: int = 1000, backend: str = "positional", **kwargs: Any):
        self.name = PREFIX + name
        self._env = _import_brax_envs().get_environment(name, backend=backend, **kwargs)
        self._episode_length = episode_length

    def reset_env(self, key, params):
        state = self._env.reset(key)
        return state, state.obs

    def step_env(self, key, state, action, params):
        state = self._env.step(state, action)
        return state, state.obs, state.reward, state.done > 0.5

    def max_episode_steps(self, params: Any) -> int:
        return self._episode_length

    def observation_spec(self, params: Any) -> ObsSpec:
        return ObsSpec((int(self._env.observation_size),), jnp.dtype(jnp.float32))

    def action_spec(self, params: Any) -> BoxSpec:
        return BoxSpec((int(self._env.action_size),), -1.0, 1.0)


def make_brax_env(env_id: str) -> BraxEnv:
    """The adapter for `brax/<name>`; ImportError naming the extra if Brax is missing."""
    try:
        _import_brax_envs()
    except ImportError:
        raise ImportError(f"{env_id!r} needs Brax: pip install 'podracer[brax]'") from None
    return BraxEnv(env_id[len(PREFIX):])
