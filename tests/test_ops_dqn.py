"""Value-based ops against hand-computed values and rlax: n-step targets, (double) Q-learning
targets, Huber loss, termination vs truncation, epsilon-greedy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer import ops
from podracer.agents.dqn import Step, chain_targets


@pytest.fixture(params=["jit", "nojit"])
def variant(request):
    return jax.jit if request.param == "jit" else (lambda f: f)


def test_n_step_targets_hand_computed(variant):
    """T = 5, n = 3, gamma = 0.5: step 1 is truncated, step 3 terminated."""
    r = jnp.array([1.0, 2.0, 4.0, 8.0, 16.0])
    terminated = jnp.array([False, False, False, True, False])
    truncated = jnp.array([False, True, False, False, False])
    returns, discount, last = variant(lambda *xs: ops.n_step_targets(*xs, 0.5, 3))(r, terminated, truncated)
    # t=0: r0 + g r1, stops at the truncation, bootstraps from next_obs[1] with g^2.
    # t=1: r1, truncated: bootstraps from next_obs[1] with g.
    # t=2: r2 + g r3, stops at the termination: no bootstrap.
    # t=3: r3, terminated.  t=4: r4, the trajectory ends: bootstraps from next_obs[4] with g.
    np.testing.assert_allclose(returns, [1 + 0.5 * 2, 2, 4 + 0.5 * 8, 8, 16])
    np.testing.assert_allclose(discount, [0.25, 0.5, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(last, [1, 1, 3, 3, 4])


def test_one_step_targets_are_plain_transitions():
    r = jnp.array([1.0, 2.0, 3.0])
    terminated = jnp.array([False, True, False])
    returns, discount, last = ops.n_step_targets(r, terminated, jnp.zeros(3, bool), 0.9, 1)
    np.testing.assert_allclose(returns, r)
    np.testing.assert_allclose(discount, [0.9, 0.0, 0.9])
    np.testing.assert_array_equal(last, [0, 1, 2])


def test_q_learning_and_double_q_match_rlax(variant):
    keys = jax.random.split(jax.random.key(0), 5)
    B, A = 16, 3
    q_tm1, q_t_value, q_t_selector = (jax.random.normal(k, (B, A)) for k in keys[:3])
    a_tm1 = jax.random.randint(keys[3], (B,), 0, A)
    r_t = jax.random.normal(keys[4], (B,))
    discount_t = jnp.where(jnp.arange(B) % 4 == 0, 0.0, 0.99)

    td = variant(lambda: ops.td_error(q_tm1, a_tm1, ops.q_learning_target(r_t, discount_t, q_t_value)))()
    expected = jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value)
    np.testing.assert_allclose(td, expected, rtol=1e-6, atol=1e-6)

    target = ops.double_q_learning_target(r_t, discount_t, q_t_value, q_t_selector)
    td = variant(ops.td_error)(q_tm1, a_tm1, target)
    expected = jax.vmap(rlax.double_q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    np.testing.assert_allclose(td, expected, rtol=1e-6, atol=1e-6)


def test_double_q_target_hand_computed():
    """The online network picks action 1, the target network values it at 5 (not max 7)."""
    q_t_value = jnp.array([[7.0, 5.0]])
    q_t_selector = jnp.array([[0.0, 1.0]])
    r, d = jnp.array([1.0]), jnp.array([0.5])
    np.testing.assert_allclose(ops.double_q_learning_target(r, d, q_t_value, q_t_selector), [1.0 + 0.5 * 5.0])
    np.testing.assert_allclose(ops.q_learning_target(r, d, q_t_value), [1.0 + 0.5 * 7.0])


def test_huber_matches_rlax():
    x = jnp.linspace(-3, 3, 13)
    np.testing.assert_allclose(ops.huber_loss(x, 1.0), rlax.huber_loss(x, 1.0), rtol=1e-6)
    np.testing.assert_allclose(ops.huber_loss(jnp.array([0.5, 2.0])), [0.125, 1.5])


def chains(reward, terminated=None, truncated=None, first=None) -> Step:
    """Chains of consecutive steps `[M, n]` with only the fields `chain_targets` reads."""
    reward = jnp.asarray(reward, jnp.float32)
    flag = lambda x: jnp.zeros(reward.shape, bool) if x is None else jnp.asarray(x, bool)  # noqa: E731
    nothing = jnp.zeros(reward.shape)
    return Step(nothing, nothing, reward, flag(terminated), flag(truncated), nothing, flag(first))


def test_chain_targets_stop_at_episode_ends_and_new_streams():
    """n = 3, gamma = 0.5, rewards 1, 2, 4 along each chain."""
    r = [[1.0, 2.0, 4.0]] * 6
    F, T = False, True
    returns, discount, last = chain_targets(chains(
        r,
        terminated=[[F, F, F], [F, F, F], [T, F, F], [F, F, F], [F, F, F], [F, T, F]],
        truncated=[[F, F, F], [F, T, F], [F, F, F], [F, F, F], [F, F, F], [F, F, F]],
        first=[[F, F, F], [F, F, F], [F, F, F], [F, F, T], [T, T, F], [F, F, F]],
    ), 0.5)
    # 0: three rewards, bootstraps after the third. 1: truncated after the second: bootstraps
    # from its final observation. 2: terminated at once: no bootstrap. 3: the third step
    # starts a new stream: the chain stops before it and bootstraps after the second.
    # 4: a new stream at the second step (step 0's own `first` does not matter).
    # 5: terminated after the second.
    np.testing.assert_allclose(returns, [1 + 1 + 1, 1 + 1, 1, 1 + 1, 1, 1 + 1])
    np.testing.assert_allclose(discount, [0.125, 0.25, 0.0, 0.25, 0.5, 0.0])
    np.testing.assert_array_equal(last, [2, 1, 0, 1, 0, 1])


def test_truncation_bootstraps_from_final_obs_termination_does_not():
    """One step each, env 0 truncated, env 1 terminated, same final observation: the target
    with Q(final_obs) = 10 is 1 + 0.9 * 10 when truncated, 1 when terminated."""
    returns, discount, last = chain_targets(chains([[1.0, 5.0], [1.0, 5.0]], terminated=[[False, False], [True, False]],
                                                   truncated=[[True, False], [False, False]]), 0.9)
    np.testing.assert_allclose(discount, [0.9, 0.0])
    np.testing.assert_array_equal(last, [0, 0])
    q_t = jnp.full((2, 2), 10.0)
    np.testing.assert_allclose(ops.q_learning_target(returns, discount, q_t), [10.0, 1.0])


def test_epsilon_greedy():
    q = jnp.array([[0.0, 1.0, 0.0]] * 1000)
    greedy = ops.epsilon_greedy(jax.random.key(0), q, 0.0)
    np.testing.assert_array_equal(greedy, 1)
    uniform = np.asarray(ops.epsilon_greedy(jax.random.key(1), q, 1.0))
    assert set(np.unique(uniform)) == {0, 1, 2}
    mixed = np.asarray(ops.epsilon_greedy(jax.random.key(2), q, 0.3))
    assert 0.75 < np.mean(mixed == 1) < 0.85  # 0.7 + 0.3 / 3
