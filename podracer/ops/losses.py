"""Policy-gradient losses, and legal-action masks on categorical policies.

A mask is `bool [..., A]`, True where the action is legal. Masked logits are `-inf` at
illegal actions, so the policy gives them probability 0, log-probabilities and entropies are
those of the distribution over the legal actions, and nothing is NaN (values or gradients).
A row with no legal action at all is left unmasked (an environment should never produce one;
this keeps a terminal observation with an empty mask from poisoning a loss).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def legal_or_all(legal: Array) -> Array:
    """`legal`, with rows that have no legal action made all legal: `bool [..., A]`."""
    return legal | ~jnp.any(legal, axis=-1, keepdims=True)


def masked_logits(logits: Array, legal: Array | None) -> Array:
    """Logits `[..., A]` with illegal actions set to `-inf` (unchanged without a mask)."""
    if legal is None:
        return logits
    return jnp.where(legal_or_all(legal), logits, -jnp.inf)


def categorical_log_prob(logits: Array, action: Array) -> Array:
    """`log pi(a|s)` for logits `[..., A]` and integer actions `[...]`."""
    log_probs = jax.nn.log_softmax(logits)
    # A select and a sum, not a gather: its gradient is then a select too, not a scatter
    # (slow on CPU). Exact: the other terms are zeros (never `0 * -inf` for masked actions).
    chosen = action[..., None].astype(jnp.int32) == jnp.arange(logits.shape[-1], dtype=jnp.int32)
    return jnp.sum(jnp.where(chosen, log_probs, 0.0), axis=-1)


def entropy_loss(logits: Array) -> Array:
    """Negative mean entropy of categorical policies with logits `[..., A]`; `-inf` logits
    (masked actions) contribute nothing (`0 log 0 = 0`), in value and in gradient."""
    log_probs = jax.nn.log_softmax(logits)
    finite = jnp.where(jnp.isfinite(log_probs), log_probs, 0.0)  # a where on the input: no 0 * inf
    return jnp.mean(jnp.sum(jnp.exp(log_probs) * finite, axis=-1))


def clipped_surrogate_loss(
    log_ratio: Array, advantages: Array, epsilon: float | Array
) -> Array:
    """PPO's clipped surrogate objective as a loss (Schulman et al. 2017, eq. 7).

    log_ratio:  `log pi(a|s) - log mu(a|s)`, `[N]`.
    advantages: `[N]`.
    Returns the scalar `-mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))`.
    """
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantages
    return -jnp.mean(jnp.minimum(unclipped, clipped))


def clipped_value_loss(value: Array, old_value: Array, target: Array, epsilon: float | Array | None) -> Array:
    """PPO's value loss, clipped around the values at the start of the update (as in
    OpenAI baselines' `ppo2` and CleanRL).

    value, old_value, target: `[N]`. With `epsilon` None, `0.5 mean((V - target)^2)`; else
    `0.5 mean(max((V - target)^2, (V_clip - target)^2))` with
    `V_clip = old_value + clip(V - old_value, -eps, eps)`: once the value has moved more than
    `eps` towards its target, that sample's gradient is 0.
    """
    loss = jnp.square(value - target)
    if epsilon is not None:
        clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
        loss = jnp.maximum(loss, jnp.square(clipped - target))
    return 0.5 * jnp.mean(loss)


RECONSTRUCTIONS = ("mse", "sigmoid_ce")


def reconstruction_loss(prediction: Array, target: Array, kind: str) -> Array:
    """An auto-encoder's loss, averaged over the batch and every observation entry.

    prediction: the decoder's outputs `[N, ...]`; target: the observation as float `[N, ...]`.
    `kind` "mse": `mean((prediction - target)^2)`, for any observation; "sigmoid_ce":
    `mean(-x log sigmoid(z) - (1 - x) log(1 - sigmoid(z)))` with logits `z = prediction` and
    targets `x` in [0, 1] (binary images such as MinAtar's grids: the Bernoulli likelihood
    of each cell, as a variational auto-encoder's decoder, Kingma and Welling 2014).
    """
    if kind == "mse":
        return jnp.mean(jnp.square(prediction - target))
    if kind == "sigmoid_ce":  # log(1 + e^z) - x z, stable for either sign of z
        return jnp.mean(jax.nn.softplus(prediction) - target * prediction)
    raise ValueError(f"unknown reconstruction loss {kind!r}; choose one of {RECONSTRUCTIONS}")
