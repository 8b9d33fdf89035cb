"""Categorical (C51) critics' maths (Bellemare et al. 2017, "A Distributional Perspective on
Reinforcement Learning", arXiv 1707.06887), as FastTD3 uses them for continuous actions
(Seo et al. 2025, "FastTD3: Simple, Fast, and Capable Reinforcement Learning for Humanoid
Control", arXiv 2505.22642).

A return distribution is a probability vector over `K` fixed atoms `z` evenly spaced in
`[v_min, v_max]`. Batch functions take `[B, ...]` and return `[B, ...]` unless they say
otherwise.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from podracer.ops.transforms import categorical_cross_entropy

Array = jax.Array


def categorical_support(v_min: float, v_max: float, num_atoms: int) -> Array:
    """The atoms `z [K]`: `num_atoms` points evenly spaced from `v_min` to `v_max`."""
    return jnp.linspace(v_min, v_max, num_atoms, dtype=jnp.float32)


def categorical_mean(atoms: Array, probs: Array) -> Array:
    """The expected value `sum_i p_i z_i` of distributions `probs [..., K]` over `atoms [K]`."""
    return jnp.sum(probs * atoms, axis=-1)


def categorical_projection(
    atoms: Array, probs_t: Array, r_t: Array, discount_t: Array, bonus_t: Array | None = None
) -> Array:
    """The projected distributional Bellman target (Bellemare et al. 2017, alg. 1).

    Each atom `z_j` carrying `p_j` moves to `Tz_j = clip(r + discount (z_j + bonus), v_min,
    v_max)`, and its mass is split between the two atoms around it in proportion to
    closeness: atom `z_i` receives `p_j max(0, 1 - |Tz_j - z_i| / dz)`, `dz` the spacing
    (the kernel form of rlax's `categorical_l2_project`: a `Tz_j` that lands on an atom
    gives it all its mass).

    Args:
      atoms: `[K]` the support, evenly spaced.
      probs_t: `[B, K]` the next state's distribution.
      r_t: `[B]` (n-step) return; discount_t: `[B]` its bootstrap discount (`gamma^n`, 0 where
        the episode terminated).
      bonus_t: `[B]` added to every next-state atom before discounting (SAC's
        `-alpha log pi(a'|s')`); None: 0.
    Returns:
      `[B, K]` target probabilities on `atoms`, no gradient through them.
    """
    chex.assert_rank([atoms, probs_t, r_t, discount_t], [1, 2, 1, 1])
    chex.assert_equal_shape_suffix([atoms, probs_t], 1)
    shift = jnp.zeros_like(r_t) if bonus_t is None else bonus_t
    v_min, v_max = atoms[0], atoms[-1]
    spacing = (v_max - v_min) / (atoms.shape[0] - 1)
    moved = jnp.clip(r_t[:, None] + discount_t[:, None] * (atoms[None, :] + shift[:, None]), v_min, v_max)  # [B, K]
    # weight[b, i, j]: the share of next atom j's mass that target atom i receives
    weight = jnp.clip(1.0 - jnp.abs(moved[:, None, :] - atoms[None, :, None]) / spacing, 0.0, 1.0)
    return jax.lax.stop_gradient(jnp.einsum("bij,bj->bi", weight, probs_t))


def categorical_double_q_target(
    atoms: Array, probs1_t: Array, probs2_t: Array, r_t: Array, discount_t: Array, bonus_t: Array | None = None
) -> Array:
    """Clipped double Q for twin categorical critics (FastTD3): both twins' next-state
    distributions are projected (`categorical_projection`) and, per item, the one with the
    lower expected value is the target of both.

    Args:
      atoms: `[K]`; probs1_t, probs2_t: `[B, K]` the twin (target) critics' distributions at
        the bootstrap observation and action; r_t, discount_t, bonus_t: as
        `categorical_projection`'s.
    Returns:
      `[B, K]` target probabilities, no gradient through them.
    """
    target1 = categorical_projection(atoms, probs1_t, r_t, discount_t, bonus_t)
    target2 = categorical_projection(atoms, probs2_t, r_t, discount_t, bonus_t)
    lower = categorical_mean(atoms, target1) < categorical_mean(atoms, target2)
    return jnp.where(lower[:, None], target1, target2)


def categorical_twin_q_loss(logits1_tm1: Array, logits2_tm1: Array, target_probs: Array) -> Array:
    """Both categorical critics fit the one target distribution by cross-entropy
    (Bellemare et al. 2017, alg. 1): `mean(CE(target, Q1)) + mean(CE(target, Q2))`.
    `logits1_tm1, logits2_tm1, target_probs`: `[B, K]`; returns a scalar."""
    chex.assert_equal_shape([logits1_tm1, logits2_tm1, target_probs])
    return jnp.mean(categorical_cross_entropy(logits1_tm1, target_probs)) + jnp.mean(
        categorical_cross_entropy(logits2_tm1, target_probs)
    )
