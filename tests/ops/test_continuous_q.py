"""Continuous-control ops (`podracer.ops.continuous_q`): weights, target smoothing and the
dtype of the box maps."""

import jax
import jax.numpy as jnp
import numpy as np

from podracer.ops.continuous_q import from_box, smoothed_target_action, to_box, twin_q_loss


def test_twin_q_loss_weights_each_sample():
    """Weights [1, 0]: only the first sample's errors (1 and 4) count, averaged over B = 2."""
    q1, q2, target = jnp.array([1.0, 5.0]), jnp.array([2.0, -5.0]), jnp.array([0.0, 0.0])
    np.testing.assert_allclose(twin_q_loss(q1, q2, target, jnp.array([1.0, 0.0])), (1.0 + 4.0) / 2)
    np.testing.assert_allclose(twin_q_loss(q1, q2, target), (1.0 + 25.0) / 2 + (4.0 + 25.0) / 2)


def test_smoothed_target_action_stays_in_the_unit_box_on_both_sides():
    """Actions at -1 and 1 with noise clipped to 0.5: the sum stays in [-1, 1]; an action at 0
    moves by at most 0.5."""
    unit = jnp.tile(jnp.array([[-1.0, 0.0, 1.0]]), (1000, 1))
    out = np.asarray(smoothed_target_action(jax.random.key(0), unit, 1.0, 0.5))
    assert out.min() == -1.0 and out.max() == 1.0
    assert np.all(out[:, 0] <= -0.5) and np.all(np.abs(out[:, 1]) <= 0.5) and np.all(out[:, 2] >= 0.5)
    assert np.any(out[:, 0] > -1.0) and np.any(out[:, 2] < 1.0)


def test_box_maps_and_smoothing_keep_a_bfloat16_action():
    """Bounds given as float32 NumPy arrays do not promote a bfloat16 action."""
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
    unit = jnp.array([[0.5, -1.0]], jnp.bfloat16)
    assert to_box(unit, low, high).dtype == jnp.bfloat16
    assert from_box(unit, low, high).dtype == jnp.bfloat16
    assert smoothed_target_action(jax.random.key(0), unit, 0.2, 0.5).dtype == jnp.bfloat16
