"""The policy-gradient ops (`podracer.ops.losses`) against hand-computed values."""

import jax.numpy as jnp
import numpy as np

from podracer.ops import categorical_log_prob, clipped_surrogate_loss, entropy_loss


def test_clipped_surrogate_hand_computed():
    log_ratio = jnp.log(jnp.array([1.5, 0.5, 1.1]))
    adv = jnp.array([1.0, 1.0, -1.0])
    # min(1.5, 1.2) = 1.2 ; min(0.5, 0.8) = 0.5 ; min(-1.1, -1.1) = -1.1
    np.testing.assert_allclose(clipped_surrogate_loss(log_ratio, adv, 0.2), -(1.2 + 0.5 - 1.1) / 3, rtol=1e-6)


def test_entropy_and_log_prob():
    logits = jnp.log(jnp.array([[0.5, 0.5], [0.25, 0.75]]))
    np.testing.assert_allclose(entropy_loss(logits), -np.mean([np.log(2), -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))]),
                               rtol=1e-6)
    np.testing.assert_allclose(categorical_log_prob(logits, jnp.array([0, 1])), np.log([0.5, 0.75]), rtol=1e-6)
