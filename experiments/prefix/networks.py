"""PrefixRL's Q-network (Roy et al., DAC 2021): fully convolutional over the prefix grid, with
separate area and delay Q-maps.

The grid observation `[B, N, N, C]` (`experiments.prefix.env`) goes through a 3x3
convolution and residual blocks that keep the N x N resolution, then a 1x1 convolution gives
4 values per cell: Q for (area, delay) x (add, delete). They are laid out as
`[B, 2 objectives, 2 * N * N]`, the action index being `kind * N * N + i * N + j` like the
environment's, and scalarised with the area weight w: `w Q_area + (1 - w) Q_delay`.
Having no dense layer, the same parameters serve any adder width N.

DQN uses it through `ScalarizedPrefixQNetwork`, registered as the torso "prefix_conv"
(`DQNConfig(torso="prefix_conv", torso_options=("blocks=4", "channels=32"))`): the two
maps are scalarised with the w the observation carries (its fifth channel, when w is sampled
per episode) and trained on the environment's scalarised reward; the maps are not supervised
per objective (the environments report only the scalarised reward).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.config import check
from podracer.networks import orthogonal
from podracer.types import ActionSpec, ObservationSpec, network_obs_spec

OBJECTIVES = ("area", "delay")


def q_maps_to_actions(cells: jax.Array) -> jax.Array:
    """Per-cell values `[..., N, N, 4]` (channel `objective * 2 + kind`) to
    `[..., 2 objectives, 2 * N * N]` indexed like the environment's actions."""
    *batch, n, _, _ = cells.shape
    maps = cells.reshape(*batch, n, n, 2, 2)  # [..., i, j, objective, kind]
    maps = jnp.moveaxis(maps, (-2, -1), (-5, -4))  # [..., objective, kind, i, j]
    return maps.reshape(*batch, 2, 2 * n * n)


def scalarize(q: jax.Array, area_weight: jax.Array) -> jax.Array:
    """`[B, 2, A]` Q-maps and weights `[B]` (or a scalar) to `w Q_area + (1 - w) Q_delay`,
    `[B, A]`."""
    w = jnp.asarray(area_weight, q.dtype)
    w = w.reshape(w.shape + (1,) * (q.ndim - 1 - w.ndim)) if w.ndim else w
    return w * q[..., 0, :] + (1.0 - w) * q[..., 1, :]


class _Block(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.Conv(self.channels, (3, 3), padding="SAME", kernel_init=orthogonal())(nn.relu(x))
        y = nn.Conv(self.channels, (3, 3), padding="SAME", kernel_init=orthogonal())(nn.relu(y))
        return x + y


class PrefixQNetwork(nn.Module):
    """`obs [B, N, N, C] -> q [B, 2 objectives, 2 * N * N]` (area, delay), fully
    convolutional; `blocks` residual blocks of `channels` 3x3 convolutions."""

    blocks: int = 4
    channels: int = 32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = nn.Conv(self.channels, (3, 3), padding="SAME", kernel_init=orthogonal())(obs.astype(jnp.float32))
        for _ in range(self.blocks):
            x = _Block(self.channels)(x)
        cells = nn.Conv(4, (1, 1), kernel_init=orthogonal(1.0), name="q_maps")(nn.relu(x))
        return q_maps_to_actions(cells)


class ScalarizedPrefixQNetwork(nn.Module):
    """`obs [B, N, N, C] -> q [B, 2 * N * N]`: the area and delay maps of `PrefixQNetwork`
    scalarised with the observation's w (channel 4, present when the environment samples w per
    episode). With a fixed-w environment (4 channels) w is not observed and the maps are
    averaged (w = 0.5): a single scalar Q-map, the run's w being folded into its reward."""

    blocks: int = 4
    channels: int = 32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        q = PrefixQNetwork(self.blocks, self.channels)(obs)
        area_weight = obs[..., 0, 0, 4] if obs.shape[-1] > 4 else jnp.full(obs.shape[:-3], 0.5)
        return scalarize(q, area_weight)


@dataclasses.dataclass(frozen=True)
class PrefixConvOptions:
    """Options of the "prefix_conv" torso (`agent.torso_options`)."""

    blocks: int = 4  # residual blocks
    channels: int = 32  # convolution channels

    def __post_init__(self) -> None:
        if self.blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {self.blocks}")
        if self.channels <= 0:
            raise ValueError(f"channels must be > 0, got {self.channels}")


def make_prefix_conv(options: PrefixConvOptions, obs_spec: ObservationSpec,
                     action_spec: ActionSpec) -> ScalarizedPrefixQNetwork:
    """The "prefix_conv" torso: `ScalarizedPrefixQNetwork`, for a grid observation
    `[N, N, C]` (C >= 4) with `2 * N * N` actions.

    Args:
        options: its blocks and channels.
        obs_spec: the environment's observations (a `MaskedObs` of the grid).
        action_spec: the environment's actions.

    Returns:
        The network, which outputs one Q-value per action.

    Raises:
        ConfigError: naming `agent.torso` for another environment.
    """
    shape = tuple(network_obs_spec(obs_spec).shape)
    num_actions = getattr(action_spec, "num_actions", None)
    fits = len(shape) == 3 and shape[0] == shape[1] and shape[2] >= 4
    check(fits and num_actions == 2 * shape[0] * shape[0], "agent.torso",
          "'prefix_conv' needs a prefix-adder environment (observation [N, N, C], 2 N^2 actions)",
          f"prefix_conv with observation {shape} and {num_actions} actions")
    return ScalarizedPrefixQNetwork(options.blocks, options.channels)
