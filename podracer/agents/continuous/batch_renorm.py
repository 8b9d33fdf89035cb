"""Batch Renormalization (Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch
Dependence in Batch-Normalized Models", arXiv 1702.03275), the normalisation of CrossQ's
critics (Bhatt et al. 2024), and CrossQ's twin critics built from it.

Statistics are synchronised: in training mode a batch's mean and variance are averaged over
the device axis (`axis_name`), so the layer sees the global batch whichever way it is split
over devices, and the running statistics, updated from those, stay identical on every
device (the `batch_stats` collection is replicated state like the parameters; it needs no
averaging of its own).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer import parallel
from podracer.agents.continuous.networks import TORCH_INIT, dense


class BatchRenorm(nn.Module):
    """Batch Renormalization over the leading axis: `[N, F] -> [N, F]`.

    Training mode (`train`): `y = (x - mean_B) / std_B * r + d`, with `r = std_B / std`,
    `d = (mean_B - mean) / std` against the running `mean`, `std`, clipped to
    `[1/r_max, r_max]` and `[-d_max, d_max]` and without gradient (Ioffe 2017, alg. 1); for
    the first `warmup` training steps `r = 1, d = 0` (plain batch norm, as CrossQ's reference
    implementation). The running statistics move towards the batch's by `1 - momentum` per
    training call. Evaluation mode normalises with the running statistics. Then a learned
    scale, and a learned bias with `use_bias`. `r_max = 3, d_max = 5` are CrossQ's.
    """

    train: bool
    axis_name: parallel.AxisName = None
    momentum: float = 0.99
    warmup: int = 100_000
    r_max: float = 3.0
    d_max: float = 5.0
    epsilon: float = 1e-3
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        features = (x.shape[-1],)
        mean = self.variable("batch_stats", "mean", jnp.zeros, features, jnp.float32)
        var = self.variable("batch_stats", "var", jnp.ones, features, jnp.float32)
        # training calls so far, as float32 (exact up to 2^24) like the other statistics
        steps = self.variable("batch_stats", "steps", jnp.zeros, (), jnp.float32)
        scale = self.param("scale", nn.initializers.ones, features, jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, features, jnp.float32) if self.use_bias else 0.0
        running_std = jnp.sqrt(var.value + self.epsilon)
        if not self.train or self.is_initializing():
            return (x - mean.value) / running_std * scale + bias
        batch_mean = parallel.pmean(jnp.mean(x, axis=0), self.axis_name)
        # two passes (mean, then the mean square deviation): E[x^2] - E[x]^2 loses digits
        batch_var = parallel.pmean(jnp.mean(jnp.square(x - batch_mean), axis=0), self.axis_name)
        batch_std = jnp.sqrt(batch_var + self.epsilon)
        warm = steps.value >= self.warmup
        r = jnp.where(warm, jnp.clip(batch_std / running_std, 1.0 / self.r_max, self.r_max), 1.0)
        d = jnp.where(warm, jnp.clip((batch_mean - mean.value) / running_std, -self.d_max, self.d_max), 0.0)
        y = (x - batch_mean) / batch_std * jax.lax.stop_gradient(r) + jax.lax.stop_gradient(d)
        mean.value = self.momentum * mean.value + (1.0 - self.momentum) * jax.lax.stop_gradient(batch_mean)
        var.value = self.momentum * var.value + (1.0 - self.momentum) * jax.lax.stop_gradient(batch_var)
        steps.value = steps.value + 1.0
        return y * scale + bias


class BatchRenormCritic(nn.Module):
    """CrossQ's critic (Bhatt et al. 2024, fig. 2): Batch Renormalization of the input
    `(obs, action)`, then `Dense -> BatchRenorm -> ReLU` layers of `hidden_sizes`, then a
    linear output: `(obs [N, D], unit action [N, A]) -> [N]`.

    A bias that the next Batch Renormalization subtracts again (the input normalisation's,
    the hidden layers' `Dense`) is left out: its gradient is zero up to rounding, which Adam
    would scale up to steps of the learning rate's size."""

    hidden_sizes: Sequence[int]
    train: bool
    axis_name: parallel.AxisName = None
    momentum: float = 0.99
    warmup: int = 100_000

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        def renorm(x: jax.Array, use_bias: bool = True) -> jax.Array:
            return BatchRenorm(self.train, self.axis_name, self.momentum, self.warmup, use_bias=use_bias)(x)

        x = renorm(jnp.concatenate([obs.astype(jnp.float32), action], axis=-1), use_bias=False)
        for size in self.hidden_sizes:
            x = nn.relu(renorm(nn.Dense(size, use_bias=False, kernel_init=TORCH_INIT)(x)))
        return dense(1)(x)[..., 0]


class TwinBatchRenormCritic(nn.Module):
    """Two `BatchRenormCritic`s with their own parameters and statistics (`nn.vmap`):
    `(obs [N, D], action [N, A]) -> [2, N]`."""

    hidden_sizes: Sequence[int]
    train: bool
    axis_name: parallel.AxisName = None
    momentum: float = 0.99
    warmup: int = 100_000

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        twins = nn.vmap(
            BatchRenormCritic,
            variable_axes={"params": 0, "batch_stats": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=2,
        )
        return twins(tuple(self.hidden_sizes), self.train, self.axis_name, self.momentum, self.warmup)(obs, action)
