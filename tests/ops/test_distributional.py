"""Categorical (C51) critics' maths against hand-computed and NumPy values: the support,
expected values over a batch, the twin critics' cross-entropy loss. (The projection's
oracle is in tests/agents/continuous/test_critics.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from podracer.ops import distributional


def test_support_is_evenly_spaced_from_v_min_to_v_max():
    atoms = distributional.categorical_support(-2.0, 2.0, 5)
    assert atoms.dtype == jnp.float32
    np.testing.assert_array_equal(atoms, [-2.0, -1.0, 0.0, 1.0, 2.0])


def test_mean_is_taken_per_distribution_over_the_atoms():
    atoms = jnp.array([-1.0, 0.0, 2.0])
    probs = jnp.array([[0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])  # [B = 2, K = 3]
    np.testing.assert_allclose(distributional.categorical_mean(atoms, probs), [-0.5, 1.5], rtol=1e-6)


def test_projection_without_a_bonus_moves_each_atom_by_the_return_and_the_discount():
    """`r + discount z` for atoms -1, 0, 1 (spacing 1): r = 0.5, discount 0.5 moves them to
    0, 0.5, 1; mass 0.2, 0.3, 0.5 -> atom 0 gets 0.2 + 0.15, atom 1 gets 0.15 + 0.5."""
    atoms = jnp.array([-1.0, 0.0, 1.0])
    target = jax.jit(distributional.categorical_projection)(
        atoms, jnp.array([[0.2, 0.3, 0.5]]), jnp.array([0.5]), jnp.array([0.5])
    )
    np.testing.assert_allclose(target, [[0.0, 0.35, 0.65]], atol=1e-6)


def test_twin_q_loss_is_the_sum_of_both_critics_mean_cross_entropies():
    rng = np.random.default_rng(0)
    logits1, logits2 = rng.normal(size=(2, 3, 4)).astype(np.float32)
    target = rng.dirichlet(np.ones(4), size=3).astype(np.float32)

    def cross_entropy(logits):
        log_p = logits - np.log(np.sum(np.exp(logits), axis=-1, keepdims=True))
        return np.mean(-np.sum(target * log_p, axis=-1))

    loss = jax.jit(distributional.categorical_twin_q_loss)(logits1, logits2, target)
    np.testing.assert_allclose(loss, cross_entropy(logits1) + cross_entropy(logits2), rtol=1e-5)


def test_double_q_target_projects_both_twins_with_the_bonus():
    """Bonus -0.5, r = 0, discount 1: twin "low" (all mass on 0) moves to -0.5, mean -0.5;
    twin "high" (all on 1) to 0.5, mean 0.5. Whichever twin is which, the target is low's."""
    atoms = jnp.array([-1.0, 0.0, 1.0])
    low, high = jnp.array([[0.0, 1.0, 0.0]]), jnp.array([[0.0, 0.0, 1.0]])
    target = jax.jit(distributional.categorical_double_q_target)
    for a, b in ((low, high), (high, low)):
        got = target(atoms, a, b, jnp.zeros(1), jnp.ones(1), jnp.array([-0.5]))
        np.testing.assert_allclose(got, [[0.5, 0.5, 0.0]], atol=1e-6)
