"""Q(lambda) targets (PQN's returns) against rlax and a brute-force reference."""

import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer import ops


def brute_force_q_lambda(r, terminated, truncated, q_next, gamma, lam):
    """Each step's Peng Q(lambda) return as the explicit lambda-weighted mixture of n-step
    returns over the rest of its episode within the trajectory (no recursion):
    `G_t = (1 - lam) sum_{n >= 1} lam^(n-1) G_t^(n)`, the last available n-step return
    taking the remaining weight; `G_t^(n)` bootstraps from `max q` of the n-th successor
    (0 after a termination)."""
    T = len(r)
    v = q_next.max(axis=-1)
    out = np.zeros(T)
    for t in range(T):
        # Steps of this episode from t on, within the trajectory.
        last = t
        while last < T - 1 and not (terminated[last] or truncated[last]):
            last += 1
        n_step = []
        for end in range(t, last + 1):
            g = sum(gamma ** (k - t) * r[k] for k in range(t, end + 1))
            bootstrap = 0.0 if terminated[end] else v[end]
            n_step.append(g + gamma ** (end - t + 1) * bootstrap)
        weights = [(1 - lam) * lam**i for i in range(len(n_step) - 1)] + [lam ** (len(n_step) - 1)]
        out[t] = np.dot(weights, n_step)
    return out


def random_case(seed, T=12, A=3):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=T).astype(np.float32)
    q_next = rng.normal(size=(T, A)).astype(np.float32)
    terminated = rng.uniform(size=T) < 0.15
    truncated = (rng.uniform(size=T) < 0.15) & ~terminated
    return r, terminated, truncated, q_next


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_q_lambda_targets_equal_brute_force(variant, seed):
    gamma, lam = 0.9, 0.65
    r, terminated, truncated, q_next = random_case(seed)
    discount = gamma * (1.0 - terminated)
    got = variant(ops.q_lambda_targets)(r, discount, q_next, lam, terminated | truncated)
    expected = brute_force_q_lambda(r, terminated, truncated, q_next, gamma, lam)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_q_lambda_matches_rlax_without_truncation(variant):
    """Without truncations rlax's Peng Q(lambda) (`rlax.q_lambda`: the TD errors of the
    same returns) and `rlax.lambda_returns` agree with ours; terminations cut by discount 0."""
    r, terminated, _, q_next = random_case(3, T=16)
    rng = np.random.default_rng(4)
    q_tm1 = rng.normal(size=q_next.shape).astype(np.float32)
    a_tm1 = rng.integers(0, q_next.shape[1], len(r))
    discount = 0.99 * (1.0 - terminated)
    targets = variant(ops.q_lambda_targets)(r, discount, q_next, 0.7, terminated)
    np.testing.assert_allclose(targets, ops.q_lambda_targets(r, discount, q_next, 0.7), rtol=1e-6)
    expected_td = rlax.q_lambda(q_tm1, a_tm1, r, discount.astype(np.float32), q_next, 0.7)
    np.testing.assert_allclose(targets - q_tm1[np.arange(len(r)), a_tm1], expected_td, rtol=1e-5, atol=1e-5)
    v = q_next.max(-1)
    np.testing.assert_allclose(variant(ops.lambda_returns)(r, discount, v, 0.7),
                               rlax.lambda_returns(r, discount, v, 0.7), rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_termination_does_not(variant):
    """Both end the episode at t=1; truncation keeps gamma * max q(final obs), termination
    does not, and nothing of the next episode (t=2) leaks into t=0 or t=1 in either case."""
    r = jnp.array([0.0, 1.0, 5.0])
    q_next = jnp.array([[0.0, 0.0], [10.0, 2.0], [100.0, 0.0]])
    end = jnp.array([False, True, False])
    gamma, lam = 0.9, 0.5
    truncated = variant(ops.q_lambda_targets)(r, jnp.full(3, gamma), q_next, lam, end)
    terminated = variant(ops.q_lambda_targets)(r, jnp.array([gamma, 0.0, gamma]), q_next, lam, end)
    np.testing.assert_allclose(truncated[1], 1.0 + gamma * 10.0, rtol=1e-6)
    np.testing.assert_allclose(terminated[1], 1.0, rtol=1e-6)
    # t=0: (1 - lam) * max q(s_1) + lam * G_1, discounted; max q(s_1) = 0 here.
    np.testing.assert_allclose(truncated[0], gamma * lam * truncated[1], rtol=1e-6)
    np.testing.assert_allclose(terminated[0], gamma * lam * terminated[1], rtol=1e-6)
    np.testing.assert_allclose(truncated[2], 5.0 + gamma * 100.0, rtol=1e-6)


def test_lambda_one_and_zero_are_monte_carlo_and_one_step():
    r, terminated, truncated, q_next = random_case(5)
    end = terminated | truncated
    discount = 0.9 * (1.0 - terminated)
    v = q_next.max(-1)
    one_step = ops.lambda_returns(r, discount, v, 0.0, end)
    np.testing.assert_allclose(one_step, r + discount * v, rtol=1e-6)
    monte_carlo = ops.lambda_returns(r, discount, v, 1.0, end)
    np.testing.assert_allclose(monte_carlo, brute_force_q_lambda(r, terminated, truncated, q_next, 0.9, 1.0),
                               rtol=1e-5, atol=1e-5)
