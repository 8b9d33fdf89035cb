"""Value transform and two-hot categorical representation, against rlax and by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer import ops

VALUES = jnp.array([-1234.5, -300.0, -7.3, -1.0, -0.2, 0.0, 0.4, 1.0, 3.0, 55.5, 300.0, 9999.0])


@pytest.fixture(params=["jit", "nojit"])
def variant(request):
    return jax.jit if request.param == "jit" else (lambda f: f)


def test_signed_hyperbolic_matches_rlax_and_round_trips(variant):
    h = variant(ops.signed_hyperbolic)(VALUES)
    np.testing.assert_allclose(h, rlax.signed_hyperbolic(VALUES), rtol=1e-6)
    np.testing.assert_allclose(variant(ops.signed_parabolic)(h), VALUES, rtol=1e-5, atol=1e-5)
    # The inverse in float64 by its defining formula; rlax's float32 form is ~1e-4 off it.
    x = np.asarray(VALUES, np.float64)
    z = (np.sqrt(1 + 4e-3 * (1e-3 + 1 + np.abs(x))) - 1) / 2e-3
    np.testing.assert_allclose(ops.signed_parabolic(VALUES), np.sign(x) * (z**2 - 1), rtol=3e-6)
    np.testing.assert_allclose(ops.signed_parabolic(VALUES), rlax.signed_parabolic(VALUES), rtol=3e-4)
    # By hand: h(3) = sqrt(4) - 1 + 0.003; h(-8) = -(3 - 1) - 0.008.
    np.testing.assert_allclose(ops.signed_hyperbolic(jnp.array([3.0, -8.0])), [1.003, -2.008], rtol=1e-6)


def test_two_hot_hand_computed_and_round_trip(variant):
    probs = variant(lambda x: ops.two_hot(x, -2.0, 2.0, 5))(jnp.array([0.25, -2.0, 2.0, 7.0, -1.5]))
    np.testing.assert_allclose(probs, [
        [0, 0, 0.75, 0.25, 0],  # between the support points 0 and 1
        [1, 0, 0, 0, 0],  # on the lowest point
        [0, 0, 0, 0, 1],  # on the highest point
        [0, 0, 0, 0, 1],  # clipped into the support
        [0.5, 0.5, 0, 0, 0],
    ], atol=1e-6)
    x = jnp.linspace(-2.0, 2.0, 41)
    np.testing.assert_allclose(ops.from_two_hot(ops.two_hot(x, -2.0, 2.0, 5), -2.0, 2.0), x, atol=1e-6)
    # rlax's version (with a 1e-5 fudge in its denominator) agrees.
    np.testing.assert_allclose(ops.two_hot(x, -2.0, 2.0, 5), rlax.transform_to_2hot(x, -2.0, 2.0, 5), atol=1e-4)


@pytest.mark.costly
def test_scalar_categorical_round_trip_through_logits(variant):
    """Scalars inside the support (|x| <= max_value) come back from `log(two_hot(h(x)))` as
    logits; MuZero's Atari support (the integers -300 .. 300 of h) is max_value = h^-1(300)."""
    x = jnp.array([-100.0, -3.5, 0.0, 0.7, 12.0, 110.0])
    max_value = float(ops.signed_parabolic(jnp.float32(10.0)))  # the integers -10 .. 10 of h
    probs = variant(lambda v: ops.scalar_to_categorical(v, max_value, 21))(x)
    assert probs.shape == (6, 21)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    back = variant(lambda p: ops.categorical_to_scalar(jnp.log(p + 1e-30), max_value))(probs)
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-4)
    expected = rlax.transform_to_2hot(rlax.signed_hyperbolic(x), -10.0, 10.0, 21)
    np.testing.assert_allclose(probs, expected, atol=1e-4)
    # Beyond max_value: clipped to it.
    np.testing.assert_allclose(ops.categorical_to_scalar(jnp.log(ops.scalar_to_categorical(jnp.array(1e4), 5.0, 7)), 5.0),
                               5.0, rtol=1e-5)


def test_categorical_cross_entropy_is_minimal_at_the_target():
    target = ops.two_hot(jnp.array(0.3), -1.0, 1.0, 5)
    loss_at_target = ops.categorical_cross_entropy(jnp.log(target + 1e-12), target)
    entropy = -jnp.sum(target * jnp.log(target + 1e-12))
    np.testing.assert_allclose(loss_at_target, entropy, atol=1e-5)
    assert ops.categorical_cross_entropy(jnp.zeros(5), target) > loss_at_target
    grad = jax.grad(lambda t: ops.categorical_cross_entropy(jnp.zeros(5), t))(target)
    np.testing.assert_array_equal(grad, 0.0)  # no gradient into the target


def test_scalar_categorical_round_trip_with_another_eps(variant):
    """A non-default `eps` shapes both the support and the read-back: the round trip holds
    with `eps = 0.05` too (a read-back with the default eps would miss by ~1%)."""
    x = jnp.array([-40.0, -2.0, 0.5, 30.0])
    probs = ops.scalar_to_categorical(x, 50.0, 41, eps=0.05)
    back = variant(lambda p: ops.categorical_to_scalar(jnp.log(p + 1e-30), 50.0, eps=0.05))(probs)
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-4)


def test_categorical_cross_entropy_is_per_row(variant):
    """`[B, N] -> [B]`: one cross-entropy per row, the sum over the last axis only."""
    logits = jnp.log(jnp.array([[0.5, 0.5], [0.25, 0.75]]))
    target = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(variant(ops.categorical_cross_entropy)(logits, target), -np.log([0.5, 0.75]), rtol=1e-6)
