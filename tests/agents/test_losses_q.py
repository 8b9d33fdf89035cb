"""DQN's and PQN's losses (`dqn.dqn_loss`, `pqn.pqn_loss`, and PQN's Q(lambda) targets) on tiny
hand-made batches, against oracles written in NumPy. The Q-network is a table: `obs` are
state indices and the parameters are the Q-values `[S, A]`."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.dqn import DQNConfig, dqn_loss
from podracer.agents.pqn import pqn_loss, q_lambda_targets
from podracer.replay import Transition
from podracer.types import MaskedObs, Trajectory

pytestmark = pytest.mark.timeout(120)


def table(params, obs):
    return params[obs]


# --- DQN -------------------------------------------------------------------------------

ONLINE = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0], [0.0, 4.0, 1.0], [2.0, 2.5, -2.0]], np.float32)
TARGET_Q = np.array([[0.0, 1.0, 5.0], [2.0, 0.0, 1.0], [1.0, 3.0, 0.0], [-1.0, 0.5, 0.0]], np.float32)
OBS, ACTION = np.array([0, 1, 2, 3]), np.array([1, 2, 0, 1], np.int32)
NEXT_OBS = np.array([1, 2, 3, 0])
REWARD = np.array([1.0, -0.5, 2.0, 0.0], np.float32)
DISCOUNT = np.array([0.9, 0.0, 0.81, 0.9], np.float32)  # n-step discounts; 0 after a termination
WEIGHTS = np.array([1.0, 0.5, 0.25, 2.0], np.float32)


def dqn_oracle(config: DQNConfig, legal=None) -> tuple[float, np.ndarray]:
    """Mnih et al. 2015; with `double_q` van Hasselt et al. 2016: the online network picks the
    action, the target network values it; over the legal actions only."""
    online, target = ONLINE[NEXT_OBS], TARGET_Q[NEXT_OBS]
    if legal is not None:
        online, target = np.where(legal, online, -np.inf), np.where(legal, target, -np.inf)
    best = target[np.arange(4), online.argmax(-1)] if config.double_q else target.max(-1)
    td = REWARD + DISCOUNT * best - ONLINE[OBS, ACTION]
    if config.loss == "huber":
        d = config.huber_delta
        per_item = np.where(np.abs(td) <= d, 0.5 * td**2, d * (np.abs(td) - 0.5 * d))
    else:
        per_item = 0.5 * td**2
    return float(np.mean(WEIGHTS * per_item)), td


def transitions(legal=None) -> Transition:
    next_obs = jnp.asarray(NEXT_OBS) if legal is None else MaskedObs(jnp.asarray(NEXT_OBS), jnp.asarray(legal))
    obs = jnp.asarray(OBS) if legal is None else MaskedObs(jnp.asarray(OBS), jnp.ones((4, 3), bool))
    return Transition(obs, jnp.asarray(ACTION), jnp.asarray(REWARD), jnp.asarray(DISCOUNT), next_obs)


@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_dqn_loss_matches_the_td_error_by_hand(double_q, loss):
    config = DQNConfig(double_q=double_q, loss=loss, huber_delta=1.5)
    value, (metrics, td) = jax.jit(lambda p, t, items, w: dqn_loss(p, t, table, items, w, config))(
        jnp.asarray(ONLINE), jnp.asarray(TARGET_Q), transitions(), jnp.asarray(WEIGHTS)
    )
    expected, expected_td = dqn_oracle(config)
    np.testing.assert_allclose(td, expected_td, rtol=1e-6)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], value)
    np.testing.assert_allclose(metrics["q_mean"], ONLINE[OBS].mean(), rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs"], np.abs(expected_td).mean(), rtol=1e-6)
    # The batch tells the choices apart: Double DQN's targets differ, and some |td| > delta.
    assert not np.allclose(dqn_oracle(dataclasses.replace(config, double_q=not double_q))[1], expected_td)
    assert np.abs(expected_td).max() > config.huber_delta


def test_dqn_loss_bootstraps_over_legal_actions_only():
    legal = np.array([[False, True, True], [True, True, False], [True, False, True], [True, True, True]])
    for double_q in (False, True):
        config = DQNConfig(double_q=double_q, loss="mse")
        value, (_, td) = dqn_loss(
            jnp.asarray(ONLINE), jnp.asarray(TARGET_Q), table, transitions(legal), jnp.asarray(WEIGHTS), config
        )
        expected, expected_td = dqn_oracle(config, legal)
        np.testing.assert_allclose(td, expected_td, rtol=1e-6)
        np.testing.assert_allclose(value, expected, rtol=1e-6)
        assert not np.allclose(expected_td, dqn_oracle(config)[1])


def test_dqn_loss_gradient_reaches_only_the_taken_actions_of_the_online_network():
    """No gradient through the target (nor through Double DQN's online argmax)."""
    grad = jax.grad(
        lambda p: dqn_loss(
            p, jnp.asarray(TARGET_Q), table, transitions(), jnp.asarray(WEIGHTS), DQNConfig(double_q=True, loss="mse")
        )[0]
    )(jnp.asarray(ONLINE))
    _, td = dqn_oracle(DQNConfig(double_q=True, loss="mse"))
    expected = np.zeros_like(ONLINE)
    expected[OBS, ACTION] = -WEIGHTS * td / 4
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


# --- PQN -------------------------------------------------------------------------------


def test_pqn_loss_is_half_the_mean_squared_td_error():
    target = np.array([2.0, 0.0, -1.0, 3.0], np.float32)
    loss, metrics = jax.jit(lambda p, b: pqn_loss(p, table, b))(
        jnp.asarray(ONLINE), (jnp.asarray(OBS), jnp.asarray(ACTION), jnp.asarray(target))
    )
    td = target - ONLINE[OBS, ACTION]
    np.testing.assert_allclose(loss, 0.5 * np.mean(td**2), rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs"], np.mean(np.abs(td)), rtol=1e-6)
    np.testing.assert_allclose(metrics["q_mean"], ONLINE[OBS].mean(), rtol=1e-6)


def test_pqn_q_lambda_targets_match_pengs_recursion_by_hand():
    """Gallici et al. 2024: `G_t = s r_t + gamma ((1 - lambda) max_a Q(s_{t+1}) + lambda G_{t+1})`,
    `G = s r + gamma max_a Q(s')` on the last step and at a truncation (its final observation),
    `G = s r` at a termination, `s` the reward scale."""
    gamma, lam, scale = 0.9, 0.7, 0.5
    q = jnp.asarray(TARGET_Q)
    states = np.array([[0], [1], [2], [3]])  # obs [T, B] with B = 1; next_obs[t] = obs[t + 1] where it went on
    next_states = np.array([[1], [2], [0], [1]])  # a truncation after step 1: its final observation is state 2
    terminated = np.array([[False], [False], [True], [False]])
    truncated = np.array([[False], [True], [False], [False]])
    reward = np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)
    traj = Trajectory(
        jnp.asarray(states),
        jnp.zeros((4, 1), jnp.int32),
        jnp.asarray(reward),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        jnp.asarray(next_states),
        {"q": q[jnp.asarray(states)]},
    )
    network = types.SimpleNamespace(apply=table)
    targets = jax.jit(lambda p, traj: q_lambda_targets(network, p, traj, gamma, lam, scale))(q, traj)
    v = TARGET_Q[next_states[:, 0]].max(-1)
    expected = np.zeros(4, np.float32)
    expected[3] = scale * 0.5 + gamma * v[3]
    expected[2] = scale * -1.0  # terminated
    expected[1] = scale * 2.0 + gamma * v[1]  # truncated: bootstraps from its final observation, no trace
    expected[0] = scale * 1.0 + gamma * ((1 - lam) * v[0] + lam * expected[1])
    np.testing.assert_allclose(targets[:, 0], expected, rtol=1e-6)
