"""Structured observations: dicts and NamedTuples of arrays, and their legal-action masks.

An environment may return a dict or a NamedTuple of arrays as its observation (Jumanji's
`Observation(grid, step_count, action_mask)`); the torsos take such observations
(`podracer.networks.structured`). A field named as in `MASK_FIELDS` is a legal-action mask:
`MaskFieldJaxEnv` moves it into podracer's `MaskedObs(obs, action_mask)`, which every agent
that respects masks reads, and `podracer.envs.make_configured_jax_env` applies it wherever an
environment's observation spec has such a field.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from podracer.envs.base import JaxEnv, JaxEnvWrapper
from podracer.types import Array, MaskedObs, ObservationSpec, ObsSpec, PRNGKey

MASK_FIELDS = ("action_mask", "legal_action_mask")  # Jumanji's, Pgx's


def _fields(obs: Any) -> dict[str, Any] | None:
    """The fields of a dict or NamedTuple observation by name; None for anything else."""
    if isinstance(obs, MaskedObs):
        return None
    if isinstance(obs, dict):
        return dict(obs)
    if isinstance(obs, tuple) and hasattr(obs, "_fields"):
        return obs._asdict()
    return None


def mask_field(spec: ObservationSpec) -> str | None:
    """The name of the legal-action mask field of an observation spec (`MASK_FIELDS`, a
    one-dimensional leaf), or None when it has none."""
    fields = _fields(spec)
    if not fields:
        return None
    for name in MASK_FIELDS:
        leaf = fields.get(name)
        if isinstance(leaf, ObsSpec) and len(leaf.shape) == 1:
            return name
    return None


def split_mask_field(obs: Any, name: str) -> MaskedObs:
    """`MaskedObs(rest, mask)` of a dict/NamedTuple observation (or spec) whose field `name`
    is the mask: `rest` is a dict of the other fields, or the one other field itself.

    Args:
      obs: a dict or NamedTuple with a field `name` (arrays `[..., A]` for the mask, or
        `ObsSpec`s).
      name: the mask field (`mask_field`).
    Returns:
      `MaskedObs(obs=dict or array, action_mask=bool [..., A])` (an `ObsSpec` of dtype bool
      for a spec).
    """
    fields = _fields(obs)
    mask = fields.pop(name)
    rest = next(iter(fields.values())) if len(fields) == 1 else fields
    if isinstance(mask, ObsSpec):
        return MaskedObs(rest, ObsSpec(tuple(mask.shape), np.dtype(bool)))
    return MaskedObs(rest, jnp.asarray(mask, jnp.bool_))


class MaskFieldJaxEnv(JaxEnvWrapper):
    """`env` whose observations' mask field (`field`) is moved into a `MaskedObs`; dynamics,
    time limit and rendering unchanged."""

    def __init__(self, env: JaxEnv, field: str) -> None:
        super().__init__(env)
        self._field = field

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, MaskedObs]:
        state, obs = self.env.reset_env(key, params)
        return state, split_mask_field(obs, self._field)

    def step_env(self, key: PRNGKey, state: Any, action: Array, params: Any) -> tuple[Any, MaskedObs, Array, Array]:
        state, obs, reward, terminated = self.env.step_env(key, state, action, params)
        return state, split_mask_field(obs, self._field), reward, terminated

    def observation_spec(self, params: Any) -> MaskedObs:
        return split_mask_field(self.env.observation_spec(params), self._field)


def masked_from_field(env: JaxEnv) -> JaxEnv:
    """`env` with its observations' legal-action mask field moved into a `MaskedObs`
    (`MaskFieldJaxEnv`), or `env` itself when its observations have no such field.

    Args:
      env: any `JaxEnv`.
    Returns:
      A `JaxEnv` whose observations are `MaskedObs` where `env`'s have a mask field.
    """
    field = mask_field(env.observation_spec(env.default_params))
    return env if field is None else MaskFieldJaxEnv(env, field)
