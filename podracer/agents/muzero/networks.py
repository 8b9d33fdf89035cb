"""MuZero's learned model in flax: representation, dynamics (with reward) and prediction.

The model's state is a vector of `latent_size`, min-max normalised to [0, 1] after the
representation and after every dynamics step (Schrittwieser et al. 2020, appendix G), so
that states reached by unrolling stay on the scale of those encoded from observations.
Values and rewards are categorical over `num_bins` bins of the transformed scale
(`podracer.ops.transforms`).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer import networks
from podracer.agents.muzero.config import MuZeroConfig
from podracer.config import ConfigError
from podracer.types import Array, ObsSpec

_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


def normalize_latent(latent: Array) -> Array:
    """Min-max scale each state `[..., N]` to [0, 1] (MuZero's hidden-state scaling)."""
    low = jnp.min(latent, axis=-1, keepdims=True)
    high = jnp.max(latent, axis=-1, keepdims=True)
    return (latent - low) / (high - low + 1e-8)


class SmallConv(nn.Module):
    """A small CNN for grid observations (Catch, MinAtar): 3x3 convolutions, stride 1,
    `[B, H, W] or [B, H, W, C] -> [B, H * W * channels[-1]]`."""

    channels: Sequence[int] = (16, 16)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = x.astype(jnp.float32)
        for features in self.channels:
            x = nn.Conv(features, (3, 3), kernel_init=networks.orthogonal())(x)
            x = _ACTIVATIONS[self.activation](x)
        return x.reshape(x.shape[:-3] + (-1,))


class MuZeroNetwork(nn.Module):
    """`represent(obs [B, ...]) -> latent [B, N]`; `dynamics(latent, action [B]) ->
    (next latent, reward logits [B, V])`; `predict(latent) -> (policy logits [B, A],
    value logits [B, V])`. `__call__` runs all three (for `init`)."""

    num_actions: int
    num_bins: int
    latent_size: int
    torso: nn.Module  # observation -> features
    dynamics_hidden_sizes: Sequence[int]
    prediction_hidden_sizes: Sequence[int]
    activation: str = "relu"

    def setup(self) -> None:
        self.encoder = nn.Dense(self.latent_size, kernel_init=networks.orthogonal())
        self.dynamics_torso = networks.MLP(tuple(self.dynamics_hidden_sizes), self.activation)
        self.transition = nn.Dense(self.latent_size, kernel_init=networks.orthogonal())
        self.reward_head = nn.Dense(self.num_bins, kernel_init=nn.initializers.zeros)
        self.prediction_torso = networks.MLP(tuple(self.prediction_hidden_sizes), self.activation)
        self.policy_head = nn.Dense(self.num_actions, kernel_init=networks.orthogonal(0.01))
        self.value_head = nn.Dense(self.num_bins, kernel_init=nn.initializers.zeros)

    def represent(self, obs: Array) -> Array:
        return normalize_latent(self.encoder(self.torso(obs)))

    def dynamics(self, latent: Array, action: Array) -> tuple[Array, Array]:
        inputs = jnp.concatenate([latent, jax.nn.one_hot(action, self.num_actions)], axis=-1)
        hidden = self.dynamics_torso(inputs)
        # A residual step: the next state starts from the current one.
        return normalize_latent(latent + self.transition(hidden)), self.reward_head(hidden)

    def predict(self, latent: Array) -> tuple[Array, Array]:
        hidden = self.prediction_torso(latent)
        return self.policy_head(hidden), self.value_head(hidden)

    def __call__(self, obs: Array, action: Array) -> tuple[Array, ...]:
        latent = self.represent(obs)
        next_latent, reward_logits = self.dynamics(latent, action)
        return (*self.predict(next_latent), reward_logits)


def make_network(config: MuZeroConfig, obs_spec: ObsSpec, num_actions: int) -> MuZeroNetwork:
    """The network `config` describes for observations of `obs_spec`; a torso that does not
    fit the observations is a ConfigError (before anything compiles)."""
    if config.torso == "conv":
        if len(obs_spec.shape) not in (2, 3):
            raise ConfigError(f"agent.torso 'conv' needs grid observations [H, W] or [H, W, C], got shape "
                              f"{tuple(obs_spec.shape)}")
        conv = SmallConv(tuple(config.conv_channels), config.activation)
        torso: nn.Module = nn.Sequential([_with_channels(len(obs_spec.shape)), conv,
                                          networks.MLP(tuple(config.hidden_sizes), config.activation)])
    else:
        torso = networks.MLP(tuple(config.hidden_sizes), config.activation, obs_ndim=len(obs_spec.shape))
    return MuZeroNetwork(
        num_actions=num_actions, num_bins=config.num_bins, latent_size=config.latent_size,
        torso=torso, dynamics_hidden_sizes=tuple(config.dynamics_hidden_sizes),
        prediction_hidden_sizes=tuple(config.prediction_hidden_sizes), activation=config.activation,
    )


def _with_channels(obs_ndim: int):
    """`[B, H, W] -> [B, H, W, 1]` for 2-D observations; the identity for 3-D ones."""
    return (lambda x: x[..., None]) if obs_ndim == 2 else (lambda x: x)


def init_params(network: MuZeroNetwork, key: jax.Array, obs_spec: ObsSpec):
    obs = np.zeros((1,) + tuple(obs_spec.shape), obs_spec.dtype)
    return network.init(key, obs, np.zeros((1,), np.int32))
