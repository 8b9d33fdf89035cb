"""Policy distributions over an action spec: categorical (discrete) and diagonal Gaussian
(bounded boxes), behind one interface so that an actor-critic agent is written once.

A network's policy output `out` is what `policy.sample/log_prob/entropy/mode` take:
logits `[B, A]` for `Categorical`, `(mean, log_std)`, each `[B, *shape]`, for `Gaussian`.

**Clipping, not squashing.** A Gaussian's sample is unbounded; the action given to the
environment (and stored as `Trajectory.action`) is the sample clipped to the box, and the
sample itself travels in the behaviour extras (`extras["raw_action"]`) with its own
log-probability, which is what the loss uses. Clipping is thus part of the environment,
as CleanRL's `ClipAction` wrapper makes it for `ppo_continuous_action`: the policy stays
an exact Gaussian (closed-form log-probabilities and entropy, no tanh Jacobian) and every
action an environment sees lies in its box.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.ops import categorical_log_prob, entropy_loss, gaussian_entropy, gaussian_log_prob, gaussian_sample
from podracer.types import ActionSpec, Array, BoxSpec, DiscreteSpec, PRNGKey

RAW_ACTION = "raw_action"  # extras key of a Gaussian's unclipped sample


@dataclasses.dataclass(frozen=True)
class Categorical:
    """Discrete actions `0 .. A - 1` (int32) from logits `[B, A]`; illegal actions of masked
    observations come with `-inf` logits (`acting.policy_and_value`), so they are never
    sampled and the log-probabilities and entropy are over the legal actions."""

    def sample(self, key: PRNGKey, out: Array) -> tuple[Array, dict[str, Array]]:
        """`(action [B], extras)`: the action and `log_prob`, the behaviour's log-probability."""
        action = jax.random.categorical(key, out).astype(jnp.int32)
        return action, {"log_prob": categorical_log_prob(out, action)}

    def policy_action(self, action: Array, extras: dict[str, Array]) -> Array:
        """The action whose log-probability the loss takes: the one taken."""
        return action

    def log_prob(self, out: Array, action: Array) -> Array:
        return categorical_log_prob(out, action)

    def entropy(self, out: Array) -> Array:
        """Mean entropy over the batch (a scalar)."""
        return -entropy_loss(out)

    def mode(self, out: Array) -> Array:
        return jnp.argmax(out, axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class Gaussian:
    """A diagonal Gaussian over a box: `out = (mean, log_std)`, each `[B, *shape]`.

    low, high: the box, NumPy arrays broadcastable to `shape` (clipping bounds).
    """

    shape: tuple[int, ...]
    low: Any
    high: Any

    @property
    def event_ndim(self) -> int:
        return len(self.shape)

    def sample(self, key: PRNGKey, out: tuple[Array, Array]) -> tuple[Array, dict[str, Array]]:
        """`(action [B, *shape], extras)`: the sample clipped to the box, and in `extras`
        the unclipped sample (`raw_action`) and its log-probability (`log_prob`)."""
        mean, log_std = out
        raw = gaussian_sample(key, mean, log_std)
        log_prob = gaussian_log_prob(mean, log_std, raw, self.event_ndim)
        return self.clip(raw), {"log_prob": log_prob, RAW_ACTION: raw}

    def policy_action(self, action: Array, extras: dict[str, Array]) -> Array:
        """The action whose log-probability the loss takes: the unclipped sample."""
        return extras[RAW_ACTION]

    def log_prob(self, out: tuple[Array, Array], action: Array) -> Array:
        return gaussian_log_prob(out[0], out[1], action, self.event_ndim)

    def entropy(self, out: tuple[Array, Array]) -> Array:
        """Mean entropy over the batch (a scalar), in closed form."""
        return jnp.mean(gaussian_entropy(out[0], out[1], self.event_ndim))

    def mode(self, out: tuple[Array, Array]) -> Array:
        """The mean action, clipped to the box."""
        return self.clip(out[0])

    def clip(self, action: Array) -> Array:
        return jnp.clip(action, jnp.asarray(self.low, action.dtype), jnp.asarray(self.high, action.dtype))


Policy = Categorical | Gaussian


def policy_for(action_spec: ActionSpec) -> Policy:
    """The distribution family for an action spec."""
    if isinstance(action_spec, BoxSpec):
        low, high = (np.broadcast_to(np.asarray(b, np.float32), action_spec.shape) for b in
                     (action_spec.low, action_spec.high))
        return Gaussian(tuple(action_spec.shape), low, high)
    if isinstance(action_spec, DiscreteSpec):
        return Categorical()
    raise TypeError(f"no policy distribution for action spec {action_spec!r}")


def action_size(spec: BoxSpec) -> int:
    return int(math.prod(spec.shape))
