"""Tiny environments with structured observations, for the tests of dict/NamedTuple
observations and of the generic wrappers: no suite needed."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.envs import JaxEnv
from podracer.types import DiscreteSpec, ObsSpec

SIZE = 4  # positions 0 .. SIZE - 1 on a line, drawn as a [SIZE, SIZE, 1] image


class WalkObs(NamedTuple):
    grid: jax.Array  # float32 [SIZE, SIZE, 1]: 1 at the walker's cell of the diagonal
    position: jax.Array  # int32 []
    action_mask: jax.Array  # bool [3]: left, stay, right; left illegal at 0


class StructuredWalk(JaxEnv):
    """A walk on 0 .. SIZE - 1 from 0; +1 and terminated at SIZE - 1, truncated after 12
    steps. Actions left/stay/right, left illegal at 0. Observations are a dict (or with
    `named`, a NamedTuple) of an image, a scalar and the legal-action mask (without `mask`,
    no mask: a dict, or a plain tuple of the two)."""

    name = "StructuredWalk"

    def __init__(self, named: bool = False, mask: bool = True) -> None:
        self.named, self.mask = named, mask

    def reset_env(self, key, params):
        position = jnp.zeros((), jnp.int32)
        return position, self._obs(position)

    def step_env(self, key, state, action, params):
        position = jnp.clip(state + action - 1, 0, SIZE - 1)
        terminated = position == SIZE - 1
        return position, self._obs(position), terminated.astype(jnp.float32), terminated

    def _obs(self, position):
        grid = jnp.zeros((SIZE, SIZE, 1), jnp.float32).at[position, position, 0].set(1.0)
        obs = WalkObs(grid, position, jnp.array([True, True, True]).at[0].set(position > 0))
        return self._structure(obs)

    def _structure(self, obs: WalkObs):
        """`obs` as a NamedTuple or a dict, without its mask unless `mask`."""
        if self.named:
            return obs if self.mask else (obs.grid, obs.position)
        fields = obs._asdict()
        return fields if self.mask else {"grid": fields["grid"], "position": fields["position"]}

    def max_episode_steps(self, params):
        return 12

    def observation_spec(self, params):
        spec = WalkObs(ObsSpec((SIZE, SIZE, 1), np.dtype(np.float32)), ObsSpec((), np.dtype(np.int32)),
                       ObsSpec((3,), np.dtype(bool)))
        return self._structure(spec)

    def action_spec(self, params):
        return DiscreteSpec(3)
