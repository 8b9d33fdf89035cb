"""Torsos for structured observations: dicts and NamedTuples of arrays (Jumanji, user
environments), chosen by an agent's `torso` field (`structured_torso`):

- "mlp": every field flattened and concatenated, then the MLP (`ConcatTorso`);
- "multi_encoder": one encoder per field, their features concatenated, then the MLP
  (`MultiEncoderTorso`): a 3x3 convolution (MinAtar's) for an image-like field `[H, W, C]`
  (H, W >= 3), the field as it is, flattened, for a vector, a scalar or a small grid.

Fields are taken in the order `jax.tree` flattens them (a dict's sorted keys, a NamedTuple's
fields); each is cast to float32, and an integer field that is not an image (a counter such
as Jumanji's `step_count`, up to thousands) is squashed by `symlog` (sign(x) log(1 + |x|)) so
that it cannot saturate the first layer. An observation spec that is a single `ObsSpec` is
one field.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.config import ConfigError
from podracer.networks.torsos import MLP, MinAtarCNN
from podracer.types import ObservationSpec, ObsSpec, is_obs_spec

STRUCTURED_TORSOS = ("mlp", "multi_encoder")


def is_structured(spec: ObservationSpec) -> bool:
    """Whether an observation spec (after its `MaskedObs` mask is set apart) is a dict or
    NamedTuple of fields rather than one `ObsSpec`."""
    return not is_obs_spec(spec)


def field_ndims(spec: ObservationSpec) -> tuple[int, ...]:
    """The number of trailing (per-observation) axes of each field, in `jax.tree` order."""
    return tuple(len(leaf.shape) for leaf in jax.tree.leaves(spec, is_leaf=is_obs_spec))


def symlog(x: jax.Array) -> jax.Array:
    """`sign(x) log(1 + |x|)`, elementwise (DreamerV3's squashing of unbounded inputs)."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def _flat_field(leaf: jax.Array, ndim: int) -> jax.Array:
    """One field `[*batch, *shape]` as float32 `[*batch, prod(shape)]`; an integer field
    that is not an image `[H, W, C]` squashed by `symlog`."""
    batch = leaf.shape[: leaf.ndim - ndim]
    x = leaf.astype(jnp.float32).reshape(batch + (-1,))
    counts = jnp.issubdtype(leaf.dtype, jnp.integer) and ndim != 3
    return symlog(x) if counts else x


def _flat_fields(obs: Any, ndims: Sequence[int]) -> list[jax.Array]:
    """Each field `[*batch, *shape]` as float32 `[*batch, prod(shape)]` (`_flat_field`)."""
    leaves = jax.tree.leaves(obs)
    if len(leaves) != len(ndims):
        raise ValueError(f"observation with {len(leaves)} fields, the network was built for {len(ndims)}")
    return [_flat_field(leaf, ndim) for leaf, ndim in zip(leaves, ndims)]


class ConcatTorso(nn.Module):
    """Every field flattened, concatenated, then an MLP: `obs (fields [B, ...]) -> [B, hidden_sizes[-1]]`."""

    ndims: tuple[int, ...]
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        x = jnp.concatenate(_flat_fields(obs, self.ndims), axis=-1)
        return MLP(tuple(self.hidden_sizes), self.activation, layer_norm=self.layer_norm)(x)


class MultiEncoderTorso(nn.Module):
    """One encoder per field, concatenated, then an MLP: a MinAtar convolution (`channels`
    filters, no Dense layer) for an image-like field `[H, W, C]` with H, W >= 3, the flattened
    field otherwise (an integer one squashed by `symlog`). `obs (fields [B, ...]) -> [B, hidden_sizes[-1]]`."""

    shapes: tuple[tuple[int, ...], ...]
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = False
    channels: int = 16

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        features = []
        for leaf, shape in zip(jax.tree.leaves(obs), self.shapes):
            if len(shape) == 3 and min(shape[:2]) >= 3:
                conv = MinAtarCNN(self.channels, (), self.activation, self.layer_norm)
                features.append(conv(leaf))
            else:
                features.append(_flat_field(leaf, len(shape)))
        x = jnp.concatenate(features, axis=-1)
        return MLP(tuple(self.hidden_sizes), self.activation, layer_norm=self.layer_norm)(x)


def structured_torso(torso: str, hidden_sizes: Sequence[int], activation: str, obs_spec: ObservationSpec,
                     layer_norm: bool = False) -> nn.Module:
    """The torso an agent's `torso` field names for dict/NamedTuple observations.

    Args:
      torso: "mlp" (flatten and concatenate every field, then the MLP) or "multi_encoder"
        (a convolution per image-like field, then the MLP); a CNN torso is a ConfigError.
      hidden_sizes: the MLP's layer sizes.
      activation: "tanh", "relu" or "gelu".
      obs_spec: the observation spec the network sees (no `MaskedObs` mask): a pytree of
        `ObsSpec`, or one `ObsSpec` (one field).
      layer_norm: LayerNorm before each activation.
    Returns:
      A module mapping a batch of observations (each field `[B, ...]`) to `[B, hidden_sizes[-1]]`.
    """
    if torso == "mlp":
        return ConcatTorso(field_ndims(obs_spec), tuple(hidden_sizes), activation, layer_norm)
    if torso == "multi_encoder":
        shapes = tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(obs_spec, is_leaf=is_obs_spec))
        return MultiEncoderTorso(shapes, tuple(hidden_sizes), activation, layer_norm)
    fields = jax.tree.map(lambda leaf: list(leaf.shape), obs_spec, is_leaf=lambda x: isinstance(x, ObsSpec))
    raise ConfigError(f"agent.torso {torso!r} takes one image observation; these observations have fields "
                      f"{fields}: use agent.torso 'mlp' (fields flattened and concatenated) or 'multi_encoder' "
                      "(a convolution per image-like field)")
