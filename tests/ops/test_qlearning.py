"""Value-based ops against hand-computed values and rlax: n-step targets, (double) Q-learning
targets, Huber loss, termination vs truncation, epsilon-greedy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer import ops
from podracer.agents.dqn import Step, chain_targets
from podracer.counters import Count
from podracer.types import Trajectory


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    # 1000 rows, each an independent draw: a greedy action wrong 1% of the time passes with p = 0.99**1000 < 5e-5
    q = jnp.array([[0.0, 1.0, 0.0]] * 1000)
    greedy = ops.epsilon_greedy(jax.random.key(0), q, 0.0)
    np.testing.assert_array_equal(greedy, 1)
    uniform = np.asarray(ops.epsilon_greedy(jax.random.key(1), q, 1.0))
    assert set(np.unique(uniform)) == {0, 1, 2}
    mixed = np.asarray(ops.epsilon_greedy(jax.random.key(2), q, 0.3))
    assert 0.75 < np.mean(mixed == 1) < 0.85  # 0.7 + 0.3 / 3


# --- DQN's target network and importance weights (issue #21) -------------------------------

def dqn_batch(seed: int, M: int = 8):
    """A batch of `M` random transitions (obs `[M, 4]`, 3 actions) and unit weights."""
    from podracer.replay import ReplaySample, Transition

    rng = np.random.default_rng(seed)
    items = Transition(rng.normal(size=(M, 4)).astype(np.float32), rng.integers(0, 3, M).astype(np.int32),
                       rng.normal(size=M).astype(np.float32), np.full(M, 0.9, np.float32),
                       rng.normal(size=(M, 4)).astype(np.float32))
    return ReplaySample(items, np.arange(M, dtype=np.int32), np.ones(M, np.float32))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_target_network_follows_a_counted_schedule():
    """`target_update_period=3`, hard copies, one gradient step per update: after update u
    the target is the online network as it was after update 3 * (u // 3) (the initial one
    before the first copy), and it never moves in between."""
    from podracer.agents import DQNConfig, dqn
    from podracer.types import DiscreteSpec, ObsSpec
    from tests.support.helpers import assert_trees_equal

    config = DQNConfig(buffer_size=64, batch_size=8, gradient_steps=1, learning_starts=0, target_update_period=3,
                       hidden_sizes=(8,))
    agent = dqn.make_dqn(config, ObsSpec((4,), jnp.float32), DiscreteSpec(3), num_updates=8, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    onlines = [jax.device_get(state.params.online)]
    rng = np.random.default_rng(0)
    for u in range(1, 8):
        traj = Trajectory(rng.normal(size=(2, 4, 4)).astype(np.float32), rng.integers(0, 3, (2, 4)).astype(np.int32),
                          rng.normal(size=(2, 4)).astype(np.float32), np.zeros((2, 4), bool), np.zeros((2, 4), bool),
                          rng.normal(size=(2, 4, 4)).astype(np.float32), {})
        state, _ = update(state, traj, jax.random.key(u))
        onlines.append(jax.device_get(state.params.online))
        assert int(state.opt_state.gradient_steps) == u
        assert_trees_equal(jax.device_get(state.opt_state.target), onlines[3 * (u // 3)])
        with pytest.raises(AssertionError):  # the online network moved: the schedule is not vacuous
            assert_trees_equal(onlines[u], onlines[u - 1])


@pytest.mark.slow
def test_polyak_target_moves_only_when_due():
    """`target_update_tau=0.25`, period 2: the target becomes `0.25 online + 0.75 target`
    on every second gradient step and stays put on the others."""
    from podracer.agents import DQNConfig, dqn
    from podracer.types import DiscreteSpec, ObsSpec
    from tests.support.helpers import tree_allclose

    config = DQNConfig(target_update_period=2, target_update_tau=0.25, hidden_sizes=(8,))
    network = dqn.make_q_network(config, ObsSpec((4,), jnp.float32), DiscreteSpec(3))
    optimizer = dqn.make_optimizer(config)
    online = network.init(jax.random.key(0), jnp.zeros((1, 4)))
    target = network.init(jax.random.key(1), jnp.zeros((1, 4)))
    zero = Count.zeros()
    learner = dqn.DQNLearnerState(optimizer.init(online), target, zero, jnp.zeros(()), zero)
    learn = jax.jit(dqn.make_learn_on_batch(config, network, optimizer, None))
    for step in range(1, 5):
        online, new_learner, _, _ = learn(online, learner, dqn_batch(step))
        expected = jax.tree.map(lambda o, t: 0.25 * o + 0.75 * t, online, learner.target) if step % 2 == 0 \
            else learner.target
        tree_allclose(new_learner.target, expected, rtol=1e-6, atol=1e-7)
        learner = new_learner


@pytest.mark.slow
def test_loss_weights_items_by_their_importance_weights():
    """A prioritized batch with known weights: the loss is `mean(w * loss_i)`, and weights
    `(M, 0, ..., 0)` give exactly the step of a batch of M copies of the first item."""
    from podracer.agents import DQNConfig, dqn
    from podracer.types import DiscreteSpec, ObsSpec
    from tests.support.helpers import tree_allclose

    for loss in ("mse", "huber"):
        config = DQNConfig(loss=loss, hidden_sizes=(8,), target_update_period=100)
        network = dqn.make_q_network(config, ObsSpec((4,), jnp.float32), DiscreteSpec(3))
        optimizer = dqn.make_optimizer(config)
        online = network.init(jax.random.key(0), jnp.zeros((1, 4)))
        zero = Count.zeros()
        learner = dqn.DQNLearnerState(optimizer.init(online), network.init(jax.random.key(1), jnp.zeros((1, 4))),
                                      zero, jnp.zeros(()), zero)
        learn = jax.jit(dqn.make_learn_on_batch(config, network, optimizer, None))
        sample = dqn_batch(0)
        weights = np.linspace(0.1, 1.0, 8).astype(np.float32)
        _, _, metrics, td = learn(online, learner, sample._replace(weights=weights))
        per_item = 0.5 * np.square(td) if loss == "mse" else np.asarray(ops.huber_loss(td, config.huber_delta))
        np.testing.assert_allclose(metrics["loss"], np.mean(weights * per_item), rtol=1e-5)
        assert abs(np.mean(weights * per_item) - np.mean(per_item)) > 1e-3  # the weights matter here

        first_only = sample._replace(weights=np.array([8.0] + [0.0] * 7, np.float32))
        copies = jax.tree.map(lambda x: np.repeat(x[:1], 8, axis=0), sample.items)
        weighted, _, weighted_metrics, _ = learn(online, learner, first_only)
        copied, _, copied_metrics, _ = learn(online, learner, sample._replace(items=copies))
        tree_allclose(weighted, copied, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(weighted_metrics["loss"], copied_metrics["loss"], rtol=1e-5)


def test_masked_argmax_picks_the_best_legal_action_per_row(variant):
    """Per row of `[B, A]` values, the argmax among the legal actions (an illegal action
    with the highest value is never chosen); a row with no legal action falls back to all
    actions; without a mask, the plain argmax."""
    values = jnp.array([[1.0, 5.0, 3.0], [4.0, -2.0, -1.0], [0.0, 2.0, 1.0]])
    legal = jnp.array([[True, False, True], [False, True, True], [False, False, False]])
    np.testing.assert_array_equal(variant(ops.masked_argmax)(values, legal), [2, 2, 1])
    np.testing.assert_array_equal(variant(ops.masked_argmax)(values), [1, 0, 1])


def test_td_error_and_q_learning_target_hand_computed(variant):
    """Per row: `target - q[a]`; DQN's target maxes over each row's actions (its legal ones
    given a mask, the best legal value 3 in row 0 rather than the illegal 7). Ranks are checked."""
    q_tm1 = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_allclose(variant(ops.td_error)(q_tm1, jnp.array([2, 0]), jnp.array([10.0, 10.0])), [7.0, 6.0])
    with pytest.raises(AssertionError):
        ops.td_error(q_tm1, jnp.array([2, 0]), jnp.ones((2, 1)))
    r, d = jnp.array([1.0, 1.0]), jnp.array([0.5, 0.5])
    q_t = jnp.array([[7.0, 3.0, 1.0], [0.0, 2.0, 4.0]])
    np.testing.assert_allclose(variant(ops.q_learning_target)(r, d, q_t), [1.0 + 0.5 * 7.0, 1.0 + 0.5 * 4.0])
    legal = jnp.array([[False, True, True], [True, True, True]])
    np.testing.assert_allclose(variant(ops.q_learning_target)(r, d, q_t, legal), [1.0 + 0.5 * 3.0, 1.0 + 0.5 * 4.0])


def test_epsilon_greedy_explores_only_legal_actions():
    """With a mask, a random action is uniform over the row's legal actions (all of them in
    a row with none legal); the greedy action is the best legal one."""
    q = jnp.array([[0.0, 9.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]] * 500)
    legal = jnp.array([[True, False, True, True], [False, False, False, False]] * 500)
    explored = np.asarray(ops.epsilon_greedy(jax.random.key(3), q, 1.0, legal)).reshape(500, 2)
    assert set(np.unique(explored[:, 0])) == {0, 2, 3}
    assert set(np.unique(explored[:, 1])) == {0, 1, 2, 3}
    np.testing.assert_array_equal(ops.epsilon_greedy(jax.random.key(4), q, 0.0, legal)[:2], [2, 0])
