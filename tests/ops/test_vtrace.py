"""V-trace against rlax (the oracle), hand-computed cases, and episode boundaries."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer.ops import vtrace_td_error_and_advantage

pytestmark = pytest.mark.timeout(60)

ATOL = 1e-5


def random_batch(seed: int, T: int = 12, B: int = 5):
    """Random `[T, B]` inputs; v_t is the value sequence shifted by one, as in rlax."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(T + 1, B)).astype(np.float32)
    return dict(
        v_tm1=values[:-1],
        v_t=values[1:],
        r_t=rng.normal(size=(T, B)).astype(np.float32),
        discount_t=(0.9 * (rng.uniform(size=(T, B)) > 0.2)).astype(np.float32),
        rho_tm1=np.exp(rng.normal(scale=0.7, size=(T, B))).astype(np.float32),
    )


def batched(fn, jit: bool, **kwargs):
    fn = jax.vmap(functools.partial(fn, **kwargs), in_axes=1, out_axes=1)
    return jax.jit(fn) if jit else fn


@pytest.mark.slow
@pytest.mark.parametrize("jit", [True, False], ids=["with_jit", "without_jit"])
@pytest.mark.parametrize(
    "lambda_, clip_rho, clip_pg_rho",
    [(1.0, 1.0, 1.0), (0.9, 2.0, 0.5), (0.0, 1.0, 1.0)],
)
def test_matches_rlax(jit, lambda_, clip_rho, clip_pg_rho):
    inputs = random_batch(int(lambda_ * 10))
    args = (inputs["v_tm1"], inputs["v_t"], inputs["r_t"], inputs["discount_t"], inputs["rho_tm1"])
    kwargs = dict(lambda_=lambda_, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    ours = batched(vtrace_td_error_and_advantage, jit, **kwargs)(*args)
    theirs = batched(rlax.vtrace_td_error_and_advantage, jit, **kwargs)(*args)
    for name in ("errors", "pg_advantage", "q_estimate"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), atol=ATOL, err_msg=name)


def test_matches_rlax_with_independent_successor_values_and_lambda_vector():
    inputs = random_batch(3, T=7, B=1)
    inputs = {k: v[:, 0] for k, v in inputs.items()}
    inputs["v_t"] = np.random.default_rng(4).normal(size=7).astype(np.float32)
    lambda_ = np.linspace(0.5, 1.0, 7).astype(np.float32)
    ours = vtrace_td_error_and_advantage(**inputs, lambda_=lambda_)
    theirs = rlax.vtrace_td_error_and_advantage(**inputs, lambda_=lambda_)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, atol=ATOL)


@pytest.mark.parametrize("stop_target_gradients", [True, False])
@pytest.mark.costly
def test_gradients_match_rlax(stop_target_gradients):
    inputs = {k: v[:, 0] for k, v in random_batch(5, T=6, B=1).items()}

    def loss(fn, v_tm1, v_t):
        out = fn(v_tm1, v_t, inputs["r_t"], inputs["discount_t"], inputs["rho_tm1"],
                 lambda_=0.9, stop_target_gradients=stop_target_gradients)
        return jnp.sum(out.errors ** 2) + jnp.sum(out.q_estimate)

    ours = jax.grad(functools.partial(loss, vtrace_td_error_and_advantage), argnums=(0, 1))
    theirs = jax.grad(functools.partial(loss, rlax.vtrace_td_error_and_advantage), argnums=(0, 1))
    for a, b in zip(ours(inputs["v_tm1"], inputs["v_t"]), theirs(inputs["v_tm1"], inputs["v_t"])):
        np.testing.assert_allclose(a, b, atol=ATOL)


def f32(*xs):
    return jnp.asarray(xs, jnp.float32)


def test_on_policy_is_n_step_return():
    # rho = 1, lambda = 1: v_s is the discounted return bootstrapped from the last value.
    v_tm1, v_t = f32(1.0, 2.0, 3.0), f32(2.0, 3.0, 4.0)
    r_t, discount_t, rho = f32(1.0, 1.0, 1.0), f32(0.5, 0.5, 0.5), f32(1.0, 1.0, 1.0)
    out = vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho)
    returns = f32(1 + 0.5 * (1 + 0.5 * (1 + 0.5 * 4)), 1 + 0.5 * (1 + 0.5 * 4), 1 + 0.5 * 4)
    np.testing.assert_allclose(out.errors, returns - v_tm1, atol=ATOL)
    # q_s = r_s + gamma v_{s+1}; the advantage is q_s - V(x_s).
    np.testing.assert_allclose(out.q_estimate, f32(1 + 0.5 * returns[1], 1 + 0.5 * returns[2], 3.0))
    np.testing.assert_allclose(out.pg_advantage, out.q_estimate - v_tm1, atol=ATOL)


def test_clipped_importance_weights():
    # T = 2, gamma = 1, lambda = 1: rho = (2, 0.5) clip to (1, 0.5); c = min(1, rho).
    v_tm1, v_t = f32(0.0, 0.0), f32(0.0, 10.0)
    r_t, discount_t, rho = f32(1.0, 1.0), f32(1.0, 1.0), f32(2.0, 0.5)
    out = vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho)
    delta_1 = 0.5 * (1.0 + 10.0 - 0.0)  # clipped rho_1 * td error
    delta_0 = 1.0 * (1.0 + 0.0 - 0.0)
    np.testing.assert_allclose(out.errors, f32(delta_0 + 1.0 * 1.0 * delta_1, delta_1), atol=ATOL)
    # pg advantage: clipped rho (threshold 1) times (r + gamma v_{s+1} - V); v_1 = 0 + 5.5.
    np.testing.assert_allclose(out.pg_advantage, f32(1.0 * (1.0 + 5.5), 0.5 * 11.0), atol=ATOL)


def test_truncation_bootstraps_from_final_observation_and_cuts_trace():
    # Two episodes in one trajectory: the first is truncated after step 1 (discount stays
    # gamma), its final observation has value 7; step 2 starts the next episode.
    gamma = 0.9
    v_tm1 = f32(1.0, 2.0, 3.0, 4.0)
    v_t = f32(2.0, 7.0, 4.0, 5.0)  # v_t[1] = V(final obs), not V(reset obs) = v_tm1[2]
    r_t = f32(1.0, 1.0, 100.0, 100.0)
    discount_t = f32(gamma, gamma, gamma, gamma)
    rho = f32(1.0, 1.0, 1.0, 1.0)
    end_t = jnp.asarray([False, True, False, False])
    out = vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho, end_t=end_t)

    target_1 = 1.0 + gamma * 7.0  # bootstrap from the final observation
    target_0 = 1.0 + gamma * target_1
    np.testing.assert_allclose(out.errors[:2] + v_tm1[:2], f32(target_0, target_1), atol=ATOL)
    np.testing.assert_allclose(out.q_estimate[1], target_1, atol=ATOL)
    # Each episode alone gives the same numbers: nothing leaks across the boundary.
    first = vtrace_td_error_and_advantage(v_tm1[:2], v_t[:2], r_t[:2], discount_t[:2], rho[:2])
    second = vtrace_td_error_and_advantage(v_tm1[2:], v_t[2:], r_t[2:], discount_t[2:], rho[2:])
    for whole, a, b in zip(out, first, second):
        np.testing.assert_allclose(whole, jnp.concatenate([a, b]), atol=ATOL)
    # Without `end_t` (rlax's behaviour) the next episode's rewards leak into the first.
    leaky = vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho)
    assert leaky.errors[0] + v_tm1[0] > target_0 + 50


def test_termination_needs_no_end_flag():
    # discount 0 already cuts the trace: with or without end_t, same result.
    inputs = {k: v[:, 0] for k, v in random_batch(7, T=9, B=1).items()}
    end_t = inputs["discount_t"] == 0
    with_end = vtrace_td_error_and_advantage(**inputs, lambda_=0.8, end_t=end_t)
    without = vtrace_td_error_and_advantage(**inputs, lambda_=0.8)
    for a, b in zip(with_end, without):
        np.testing.assert_allclose(a, b, atol=ATOL)


def test_rejects_mismatched_shapes():
    with pytest.raises(AssertionError):
        vtrace_td_error_and_advantage(f32(1.0, 2.0), f32(1.0), f32(1.0, 2.0), f32(1.0, 2.0), f32(1.0, 2.0))
