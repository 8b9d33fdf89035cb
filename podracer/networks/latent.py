"""A compressed latent for actor-critics: the auto-encoder of "Accelerating Distributed Deep
Reinforcement Learning" (RLDM 2019), on top of IMPALA / PPO-with-V-trace.

`encoder` (a torso, then `Dense(latent_size) -> activation`) maps an observation to a small
latent; the policy and value heads are linear in that latent and read nothing else, so acting
runs the encoder and two small heads (`__call__`). A `decoder` (`Dense(hidden) -> activation
-> Dense(prod(obs_shape))`) maps the latent back to the observation's shape; it serves the
learner's reconstruction loss only (`with_reconstruction`), never acting.

Shapes: `obs [N, ...] -> latent [N, L] -> ((out, value [N]), reconstruction [N, *obs_shape])`,
the reconstruction as unnormalised outputs (logits for a sigmoid cross-entropy, values for
a squared error; `podracer.ops.reconstruction_loss`) of `reconstruction_target(obs)`.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer.networks.layers import ACTIVATIONS, orthogonal


def reconstruction_target(obs: jax.Array) -> jax.Array:
    """What the decoder reconstructs: the observation as float32, uint8 frames scaled to
    [0, 1] as the CNN torsos scale them (MinAtar's 0/1 grids stay 0/1)."""
    x = obs.astype(jnp.float32)
    return x / 255.0 if obs.dtype == jnp.uint8 else x


class Encoder(nn.Module):
    """`obs [N, ...] -> latent [N, latent_size]`: the torso, then `Dense -> activation`."""

    torso: nn.Module
    latent_size: int
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = nn.Dense(self.latent_size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros,
                     name="latent")(self.torso(obs))
        return ACTIVATIONS[self.activation](x)


class Decoder(nn.Module):
    """`latent [N, L] -> [N, *obs_shape]`: one hidden layer, then one output per observation
    entry (unnormalised: logits or values, see the module doc)."""

    obs_shape: tuple[int, ...]
    hidden_size: int
    activation: str = "relu"

    @nn.compact
    def __call__(self, latent: jax.Array) -> jax.Array:
        x = nn.Dense(self.hidden_size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(latent)
        x = ACTIVATIONS[self.activation](x)
        x = nn.Dense(int(np.prod(self.obs_shape)), kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros,
                     name="reconstruction")(x)
        return x.reshape(latent.shape[:-1] + tuple(self.obs_shape))


class LatentActorCritic(nn.Module):
    """`encoder -> latent -> heads`, with `decoder` reading the same latent.

    `heads` is an actor-critic module (`ActorCritic` or `GaussianActorCritic`)
    whose torso is the identity on the latent, so its policy and value layers are linear in
    it. Parameters: `{"encoder", "heads", "decoder"}`; initialise with
    `method="with_reconstruction"` so that the decoder's exist too.
    """

    encoder: Encoder
    heads: nn.Module
    decoder: Decoder

    def __call__(self, obs: jax.Array) -> tuple[Any, jax.Array]:
        """Acting: `obs [N, ...] -> (out, value [N])`, the encoder and the heads only."""
        return self.heads(self.encoder(obs))

    def with_reconstruction(self, obs: jax.Array, num_decoded: int | None = None) -> tuple[Any, jax.Array, jax.Array]:
        """Learning: `obs [N, ...] -> (out, value [N], reconstruction [n, *obs_shape])`, one
        encoder pass; only the first `num_decoded` observations (all by default) are decoded."""
        latent = self.encoder(obs)
        out, value = self.heads(latent)
        return out, value, self.decoder(latent[:num_decoded])
