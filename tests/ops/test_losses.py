"""The policy-gradient ops (`podracer.ops.losses`) against hand-computed values."""

import jax.numpy as jnp
import numpy as np
import pytest

from podracer.ops import (
    categorical_log_prob,
    clipped_surrogate_loss,
    clipped_value_loss,
    entropy_loss,
    masked_logits,
    reconstruction_loss,
)


def test_clipped_surrogate_hand_computed():
    log_ratio = jnp.log(jnp.array([1.5, 0.5, 1.1]))
    adv = jnp.array([1.0, 1.0, -1.0])
    # min(1.5, 1.2) = 1.2 ; min(0.5, 0.8) = 0.5 ; min(-1.1, -1.1) = -1.1
    np.testing.assert_allclose(clipped_surrogate_loss(log_ratio, adv, 0.2), -(1.2 + 0.5 - 1.1) / 3, rtol=1e-6)


def test_entropy_and_log_prob():
    logits = jnp.log(jnp.array([[0.5, 0.5], [0.25, 0.75]]))
    np.testing.assert_allclose(
        entropy_loss(logits), -np.mean([np.log(2), -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))]), rtol=1e-6
    )
    np.testing.assert_allclose(categorical_log_prob(logits, jnp.array([0, 1])), np.log([0.5, 0.75]), rtol=1e-6)


def test_clipped_surrogate_clips_a_low_ratio_with_a_negative_advantage():
    """ratio 0.5 < 1 - eps with A = -1: min(-0.5, -0.8) = -0.8, the lower clip binds."""
    loss = clipped_surrogate_loss(jnp.log(jnp.array([0.5])), jnp.array([-1.0]), 0.2)
    np.testing.assert_allclose(loss, 0.8, rtol=1e-6)


def test_entropy_and_log_prob_over_leading_axes():
    """Logits `[T, B, A]`: a log-probability per `[T, B]` entry, the entropy summed over the
    actions only and averaged over the rest."""
    probs = jnp.array([[[0.5, 0.5, 0.0], [0.25, 0.75, 0.0]], [[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]]])
    logits = jnp.log(probs)
    np.testing.assert_allclose(
        categorical_log_prob(logits, jnp.array([[1, 0], [0, 2]])), np.log([[0.5, 0.25], [1.0, 0.5]]), rtol=1e-6
    )
    p = np.asarray(probs)
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    np.testing.assert_allclose(entropy_loss(logits), -np.mean(entropy), rtol=1e-6)


def test_clipped_value_loss_hand_computed():
    """Without epsilon half the mean squared error; with epsilon 0.5 the first value (moved
    1 from 0 towards its target 2) is clipped to 0.5: max(1, 2.25) = 2.25; the second (moved
    0.25 away from its target) keeps its error max(1.5625, 1) = 1.5625."""
    value, old, target = jnp.array([1.0, -0.25]), jnp.array([0.0, 0.0]), jnp.array([2.0, 1.0])
    np.testing.assert_allclose(clipped_value_loss(value, old, target, None), 0.5 * np.mean([1.0, 1.5625]))
    np.testing.assert_allclose(clipped_value_loss(value, old, target, 0.5), 0.5 * np.mean([2.25, 1.5625]))


def test_clipped_value_loss_clips_a_value_moved_down():
    """The lower clip: the value moved from 0 down to -1 with eps 0.1 is clipped to -0.1; its
    target -2 lies below both, so the clipped error (1.9^2 = 3.61) is the max, not 1."""
    loss = clipped_value_loss(jnp.array([-1.0]), jnp.array([0.0]), jnp.array([-2.0]), 0.1)
    np.testing.assert_allclose(loss, 0.5 * 3.61, rtol=1e-6)


def test_masked_logits_over_leading_axes():
    """A mask `[T, B, A]`: only the `[t, b]` row with no legal action is made all legal, one
    row at a time along the last axis."""
    logits = jnp.arange(12.0).reshape(2, 2, 3)
    legal = jnp.array([[[False, False, False], [True, False, False]], [[False, True, True], [True, True, True]]])
    expected = np.where(np.asarray(legal), np.asarray(logits), -np.inf)
    expected[0, 0] = np.asarray(logits[0, 0])
    np.testing.assert_array_equal(masked_logits(logits, legal), expected)


def test_masked_logits_keep_legal_actions_and_all_of_an_illegal_row():
    logits = jnp.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    legal = jnp.array([[True, False, True], [False, False, False]])
    np.testing.assert_array_equal(masked_logits(logits, legal), [[1.0, -np.inf, 3.0], [1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(masked_logits(logits, None), logits)


def test_reconstruction_losses_hand_computed():
    z, x = jnp.array([[0.0, 2.0]]), jnp.array([[1.0, 0.0]])
    np.testing.assert_allclose(reconstruction_loss(z, x, "mse"), np.mean([1.0, 4.0]))
    ce = np.mean([np.log(2.0) - 0.0, np.log1p(np.exp(2.0))])
    np.testing.assert_allclose(reconstruction_loss(z, x, "sigmoid_ce"), ce, rtol=1e-6)
    with pytest.raises(ValueError, match="unknown reconstruction loss"):
        reconstruction_loss(z, x, "l1")
