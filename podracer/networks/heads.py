"""Heads: flax modules that put an algorithm's outputs on a torso, `obs [B, ...] -> ...`:
policy logits and a value (`ActorCritic`), a diagonal Gaussian policy and a value
(`GaussianActorCritic`), action values (`QNetwork`)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer.networks.layers import orthogonal


class ActorCritic(nn.Module):
    """Policy logits and state value, `obs [B, ...] -> (logits [B, A], value [B])`.

    With a `critic_torso` the actor and the critic have separate torsos (the CleanRL and
    PureJaxRL choice for classic control); without one they share `torso` (the Atari choice).
    """

    num_actions: int
    torso: nn.Module
    critic_torso: nn.Module | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        hidden_pi = self.torso(obs)
        hidden_v = hidden_pi if self.critic_torso is None else self.critic_torso(obs)
        logits = nn.Dense(self.num_actions, kernel_init=orthogonal(0.01), name="policy")(hidden_pi)
        value = nn.Dense(1, kernel_init=orthogonal(1.0), name="value")(hidden_v)
        return logits, value.squeeze(-1)


class GaussianActorCritic(nn.Module):
    """A diagonal Gaussian policy and a state value for a box of actions:
    `obs [B, ...] -> ((mean [B, *shape], log_std [B, *shape]), value [B])`.

    The log standard deviation is a learned vector, the same in every state (Schulman et
    al. 2017's MuJoCo setting, CleanRL's `ppo_continuous_action`), returned broadcast to the
    batch. Why state-independent: the exploration noise then moves only with the average
    policy gradient, so it cannot collapse in the few states a batch visits most (a
    state-dependent scale needs bounds or a softplus floor for that), and a run starts
    from the same noise everywhere (`log_std_init`). Torsos as in `ActorCritic`.
    """

    action_shape: tuple[int, ...]
    torso: nn.Module
    critic_torso: nn.Module | None = None
    log_std_init: float = 0.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        hidden_pi = self.torso(obs)
        hidden_v = hidden_pi if self.critic_torso is None else self.critic_torso(obs)
        size = int(np.prod(self.action_shape))
        mean = nn.Dense(size, kernel_init=orthogonal(0.01), name="policy")(hidden_pi)
        mean = mean.reshape(mean.shape[:-1] + tuple(self.action_shape))
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), tuple(self.action_shape))
        value = nn.Dense(1, kernel_init=orthogonal(1.0), name="value")(hidden_v)
        return (mean, jnp.broadcast_to(log_std, mean.shape)), value.squeeze(-1)


class QNetwork(nn.Module):
    """Action values, `obs [B, ...] -> q [B, A]`: a torso and a linear head (Mnih et al. 2015)."""

    num_actions: int
    torso: nn.Module

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(self.num_actions, kernel_init=orthogonal(1.0), name="q")(self.torso(obs))
