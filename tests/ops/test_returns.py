"""GAE and discounted returns (`podracer.ops.returns`) against hand-computed values, rlax and an episode-by-episode reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer.ops import discounted_returns, gae_advantages
from tests.support.helpers import gae_episode_by_episode


class TestGae:
    def test_hand_computed(self, variant):
        gamma, lam = 0.9, 0.5
        r = jnp.array([1.0, 2.0, 3.0])
        v_tm1 = jnp.array([0.5, 1.0, 1.5])
        v_t = jnp.array([1.0, 1.5, 2.0])
        discount = jnp.full(3, gamma)
        end = jnp.zeros(3, bool)
        adv, target = variant(gae_advantages)(r, discount, v_tm1, v_t, lam, end)
        d = [1 + 0.9 * 1.0 - 0.5, 2 + 0.9 * 1.5 - 1.0, 3 + 0.9 * 2.0 - 1.5]
        a2 = d[2]
        a1 = d[1] + 0.45 * a2
        a0 = d[0] + 0.45 * a1
        np.testing.assert_allclose(adv, [a0, a1, a2], rtol=1e-6)
        np.testing.assert_allclose(target, np.array([a0, a1, a2]) + np.asarray(v_tm1), rtol=1e-6)

    def test_matches_rlax_without_truncation(self, variant):
        key = jax.random.key(0)
        T = 16
        k1, k2, k3 = jax.random.split(key, 3)
        r = jax.random.normal(k1, (T,))
        values = jax.random.normal(k2, (T + 1,))
        terminated = jax.random.bernoulli(k3, 0.2, (T,))
        discount = 0.99 * (1.0 - terminated)
        expected = rlax.truncated_generalized_advantage_estimation(r, discount, 0.95, values)
        adv, _ = variant(gae_advantages)(r, discount, values[:-1], values[1:], 0.95, terminated)
        np.testing.assert_allclose(adv, expected, atol=1e-5)

    def test_truncation_bootstraps_termination_does_not(self, variant):
        """Both end the episode at t=1; only truncation keeps gamma * V(final obs). The next
        episode (t=2) has a reward and values of its own, so a trace that is not cut at the
        end leaks them into t=1 and t=0."""
        r = jnp.array([0.0, 1.0, 5.0])
        v_tm1 = jnp.array([0.0, 0.0, 2.0])
        v_t = jnp.array([0.0, 10.0, 3.0])  # V(final obs) = 10 at the step that ended
        gamma = 0.9
        end = jnp.array([False, True, False])
        trunc_adv, _ = variant(gae_advantages)(r, jnp.full(3, gamma), v_tm1, v_t, 1.0, end)
        term_adv, _ = variant(gae_advantages)(r, jnp.array([gamma, 0.0, gamma]), v_tm1, v_t, 1.0, end)
        np.testing.assert_allclose(trunc_adv, [0.9 * 10.0, 1.0 + 0.9 * 10.0, 5.0 + 0.9 * 3.0 - 2.0], rtol=1e-6)
        np.testing.assert_allclose(term_adv, [0.9 * 1.0, 1.0, 5.0 + 0.9 * 3.0 - 2.0], rtol=1e-6)

    def test_matches_rlax_episode_by_episode(self, variant):
        """A trajectory crossing several episode ends of both kinds equals rlax's GAE run on
        each episode alone, bootstrapping from V(final obs) after a truncation."""
        T, gamma, lam = 24, 0.9, 0.8
        rng = np.random.default_rng(7)
        r = rng.normal(size=T).astype(np.float32)
        v_tm1 = rng.normal(size=T).astype(np.float32)
        v_t = np.append(v_tm1[1:], rng.normal()).astype(np.float32)  # V(obs[t + 1]) within an episode
        terminated = np.zeros(T, bool)
        truncated = np.zeros(T, bool)
        terminated[[4, 15]] = True
        truncated[[9, 10, 20]] = True
        v_t[truncated] = rng.normal(size=truncated.sum())  # V(final obs), not the next episode's first
        discount = (gamma * ~terminated).astype(np.float32)
        adv, target = variant(gae_advantages)(r, discount, v_tm1, v_t, lam, terminated | truncated)
        expected = gae_episode_by_episode(r, discount, v_tm1, v_t, lam, terminated | truncated)
        np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target, expected + v_tm1, rtol=1e-5, atol=1e-5)

    def test_rejects_bad_rank(self, variant):
        with pytest.raises(AssertionError):
            gae_advantages(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.zeros((2, 3)), 0.9,
                           jnp.zeros((2, 3), bool))


def test_discounted_returns_restart_after_each_episode_end(variant):
    """`G_t = r_t + gamma * G_{t-1}` within an episode, restarting at the step after each
    end; an end at the last step changes nothing. A `[T, 1]` input is refused."""
    r = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    end = jnp.array([False, True, False, False, True])
    np.testing.assert_allclose(variant(discounted_returns)(r, end, 0.5), [1.0, 2.5, 3.0, 5.5, 7.75])
    never_ends = variant(discounted_returns)(r, jnp.zeros(5, bool), jnp.float32(0.1))
    np.testing.assert_allclose(never_ends, [1.0, 2.1, 3.21, 4.321, 5.4321], rtol=1e-6)
    with pytest.raises(AssertionError):
        discounted_returns(r[:, None], end[:, None], 0.5)


def test_discounted_returns_keep_the_reward_dtype(variant):
    """A bfloat16 reward gives bfloat16 returns: the restart mask and the initial carry take
    the reward's dtype, not float32's."""
    r = jnp.array([1.0, 2.0, 3.0], jnp.bfloat16)
    returns = variant(discounted_returns)(r, jnp.array([True, False, False]), 0.5)
    assert returns.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(returns, np.float32), [1.0, 2.0, 4.0])
