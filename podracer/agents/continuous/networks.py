"""SAC's and TD3's networks: actors and twin critics over a torso a config names.

Layers take PyTorch's default initialisation (uniform, variance 1/(3 fan_in)), as CleanRL's
SAC and TD3 do, rather than orthogonal matrices (whose QR also hangs `jit(vmap(init))` on
two CPU cores, DESIGN.md).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.agents.continuous.config import ReplayActorCriticConfig
from podracer.config import check

# PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights
TORCH_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def dense(size: int) -> nn.Dense:
    return nn.Dense(size, kernel_init=TORCH_INIT)


class ReluMLP(nn.Module):
    """`Dense -> ReLU` layers of `hidden_sizes`: `[N, D] -> [N, hidden_sizes[-1]]`."""

    hidden_sizes: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden_sizes:
            x = nn.relu(dense(size)(x))
        return x


class SimBa(nn.Module):
    """SimBa's torso (Lee et al. 2024, "SimBa: Simplicity Bias for Scaling Up Parameters in
    Deep RL", arXiv 2410.09754, fig. 1): a linear embedding of width `width`, `blocks`
    residual blocks `x + Dense(width)(ReLU(Dense(4 width)(LayerNorm(x))))`, and a final
    LayerNorm: `[N, D] -> [N, width]`. The paper's running observation normalisation is not
    part of this torso."""

    width: int = 256
    blocks: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(self.width, kernel_init=nn.initializers.orthogonal(1.0))(x)
        for _ in range(self.blocks):
            y = nn.LayerNorm()(x)
            y = nn.relu(nn.Dense(4 * self.width, kernel_init=nn.initializers.he_normal())(y))
            x = x + nn.Dense(self.width, kernel_init=nn.initializers.he_normal())(y)
        return nn.LayerNorm()(x)


def make_torso(config: ReplayActorCriticConfig) -> nn.Module:
    """The torso `config.torso` names (a fresh module each call)."""
    if config.torso == "simba":
        return SimBa(config.hidden_sizes[0], config.simba_blocks)
    return ReluMLP(tuple(config.hidden_sizes))


class SquashedGaussianActor(nn.Module):
    """SAC's actor: `obs [N, D] -> (mean [N, A], log_std [N, A])` of the Gaussian whose tanh
    is the action; the log-std squashed into `[log_std_min, log_std_max]` (CleanRL's)."""

    action_dim: int
    torso: nn.Module
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = self.torso(obs.astype(jnp.float32))
        mean = dense(self.action_dim)(x)
        log_std = jnp.tanh(dense(self.action_dim)(x))
        return mean, self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1.0)


class DeterministicActor(nn.Module):
    """TD3's actor: `obs [N, D] -> tanh(...) [N, A]`, an action in the unit box."""

    action_dim: int
    torso: nn.Module

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return jnp.tanh(dense(self.action_dim)(self.torso(obs.astype(jnp.float32))))


class Critic(nn.Module):
    """`Q(s, a)`: `(obs [N, D], unit action [N, A]) -> [N]` on their concatenation, or with
    `num_atoms` the logits `[N, num_atoms]` of a categorical return distribution."""

    torso: nn.Module
    num_atoms: int | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs.astype(jnp.float32), action], axis=-1)
        if self.num_atoms is not None:
            return dense(self.num_atoms)(self.torso(x))
        return dense(1)(self.torso(x))[..., 0]


class TwinCritic(nn.Module):
    """Two critics with their own parameters, run as one batched computation (`nn.vmap` over
    a leading parameter axis): `(obs [N, D], action [N, A]) -> [2, N]` (`[2, N, num_atoms]`
    with `num_atoms`)."""

    torso: nn.Module
    num_atoms: int | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        twins = nn.vmap(Critic, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                        out_axes=0, axis_size=2)
        return twins(self.torso, self.num_atoms)(obs, action)


def action_dim(shape: tuple[int, ...]) -> int:
    """The number of action components: a `BoxSpec` of rank 1 (ConfigError otherwise)."""
    check(len(shape) == 1, "env.id", "must have actions of rank 1 for SAC and TD3 (BoxSpec shape (A,))", shape)
    return int(shape[0])
