"""Torsos: flax modules from observations to features `[B, ...] -> [B, F]` (MLP, the MinAtar CNN,
the Nature and IMPALA Atari CNNs)."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.networks.layers import ACTIVATIONS, orthogonal


class MLP(nn.Module):
    """Flattens its input and applies `Dense -> activation` layers (orthogonal init), with
    `layer_norm` `Dense -> LayerNorm -> activation` (PQN's normalised network)."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1  # trailing axes of one observation, flattened together
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(jnp.float32)
        if self.obs_ndim != 1:
            x = x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,))
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x)
            x = ACTIVATIONS[self.activation](nn.LayerNorm()(x) if self.layer_norm else x)
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar torso (Young and Tian 2019; PQN's, Gallici et al. 2024): a 3x3 VALID
    convolution with `channels` filters, then `Dense` layers; with `layer_norm` a LayerNorm
    before each activation. `[B, H, W, C] -> [B, hidden_sizes[-1]]`.

    The convolution is computed as a matmul over 3x3 patches (same parameters `[3, 3, C,
    channels]` and result as `nn.Conv`): XLA:CPU runs convolution gradients inside a loop
    (the epochs and minibatches of an update) about 9x slower than the equivalent matmul.
    """

    channels: int = 16
    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(jnp.float32)
        height, width, depth = x.shape[-3:]
        kernel = self.param("kernel", orthogonal(), (3, 3, depth, self.channels))
        bias = self.param("bias", nn.initializers.zeros, (self.channels,))
        patches = jnp.concatenate(
            [x[..., i:i + height - 2, j:j + width - 2, :] for i in range(3) for j in range(3)], axis=-1
        )
        x = patches @ kernel.reshape(9 * depth, self.channels) + bias
        x = self._activate(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        for size in self.hidden_sizes:
            x = self._activate(nn.Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))
        return x

    def _activate(self, x: jax.Array) -> jax.Array:
        return ACTIVATIONS[self.activation](nn.LayerNorm()(x) if self.layer_norm else x)


def _scale_frames(x: jax.Array) -> jax.Array:
    """uint8 frames `[B, H, W, C]` to float32 in [0, 1], on the device; float inputs (frames
    already scaled, or normalised by `--agent.normalize-observations`) are kept as they are."""
    if x.dtype == jnp.uint8:
        return x.astype(jnp.float32) / 255.0
    return x.astype(jnp.float32)


class NatureCNN(nn.Module):
    """The DQN torso (Mnih et al. 2015): `[B, 84, 84, C] uint8 -> [B, 512]`."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _scale_frames(x)
        for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID",
                        kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x)
            x = nn.relu(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        return nn.relu(nn.Dense(512, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))


class _ResidualBlock(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.Conv(self.features, (3, 3), kernel_init=orthogonal())(nn.relu(x))
        y = nn.Conv(self.features, (3, 3), kernel_init=orthogonal())(nn.relu(y))
        return x + y


class ImpalaCNN(nn.Module):
    """The IMPALA torso (Espeholt et al. 2018, "deep"): `[B, 84, 84, C] uint8 -> [B, 256]`.

    Three stages of `conv 3x3 -> max-pool 3x3/2 -> 2 residual blocks` with 16, 32, 32
    channels, then `relu -> Dense(256) -> relu`.
    """

    channels: Sequence[int] = (16, 32, 32)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _scale_frames(x)
        for features in self.channels:
            x = nn.Conv(features, (3, 3), kernel_init=orthogonal())(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ResidualBlock(features)(x)
            x = _ResidualBlock(features)(x)
        x = nn.relu(x).reshape(x.shape[:-3] + (-1,))
        return nn.relu(nn.Dense(256, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))
