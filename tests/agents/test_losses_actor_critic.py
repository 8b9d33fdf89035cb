"""PPO's and IMPALA's losses (`ppo.ppo_loss`, `impala.impala_loss`) on tiny hand-made batches,
against oracles written in NumPy: every term and every coefficient shows in the number."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.impala import ImpalaConfig, impala_loss
from podracer.agents.policies import Categorical
from podracer.agents.ppo import PPOBatch, PPOConfig, ppo_loss
from podracer.types import Trajectory

pytestmark = pytest.mark.timeout(120)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# --- PPO -------------------------------------------------------------------------------

LOGITS = np.array([[0.0, 1.0], [0.5, -0.5], [2.0, 0.0], [0.0, 0.0]], np.float32)
ACTION = np.array([1, 0, 0, 1], np.int32)
# the ratios pi / mu: 0.5 and 1.5 fall outside 1 +- 0.2 (the clip is active), 1.1 inside
RATIO = np.array([0.5, 1.5, 1.1, 0.7], np.float32)
ADVANTAGE = np.array([-1.0, 2.0, 1.0, -0.5], np.float32)
VALUE = np.array([1.0, 0.3, -0.4, 2.0], np.float32)  # V(obs) under the parameters differentiated
OLD_VALUE = np.array([0.5, 0.2, 0.0, 1.0], np.float32)  # at the update's start: the clip's centre
TARGET = np.array([2.0, 0.0, -1.0, 0.0], np.float32)
PPO = PPOConfig(
    clip_eps=0.2, value_coef=0.7, entropy_coef=0.3, latent_size=4, shared_torso=True, reconstruction_coef=2.0
)
RECONSTRUCTION = 0.25


def ppo_batch() -> PPOBatch:
    behaviour = log_softmax(LOGITS)[np.arange(4), ACTION] - np.log(RATIO)
    return PPOBatch(
        jnp.zeros((4, 1)),
        jnp.asarray(ACTION),
        jnp.asarray(behaviour),
        jnp.asarray(OLD_VALUE),
        jnp.asarray(ADVANTAGE),
        jnp.asarray(TARGET),
    )


def ppo_forward(params, inputs):
    """A stand-in for the model: its parameters are its outputs."""
    return params["logits"], params["value"], params["reconstruction"]


PPO_PARAMS = {"logits": jnp.asarray(LOGITS), "value": jnp.asarray(VALUE), "reconstruction": jnp.float32(RECONSTRUCTION)}


def ppo_oracle(config: PPOConfig) -> dict[str, float]:
    eps = config.clip_eps
    pg = -np.mean(np.minimum(RATIO * ADVANTAGE, np.clip(RATIO, 1 - eps, 1 + eps) * ADVANTAGE))
    squared = (VALUE - TARGET) ** 2
    if config.clip_value:
        clipped = OLD_VALUE + np.clip(VALUE - OLD_VALUE, -eps, eps)
        squared = np.maximum(squared, (clipped - TARGET) ** 2)
    value = 0.5 * np.mean(squared)
    p = np.exp(log_softmax(LOGITS))
    entropy = np.mean(-np.sum(p * np.log(p), -1))
    loss = pg + config.value_coef * value - config.entropy_coef * entropy
    if config.latent_size > 0:
        loss += config.reconstruction_coef * RECONSTRUCTION
    return {
        "loss": loss,
        "pg_loss": pg,
        "value_loss": value,
        "entropy": entropy,
        "clip_fraction": np.mean(np.abs(RATIO - 1) > eps),
        "approx_kl": np.mean((RATIO - 1) - np.log(RATIO)),
    }


@pytest.mark.parametrize("clip_value", [True, False])
def test_ppo_loss_matches_the_clipped_objective_by_hand(clip_value):
    config = dataclasses.replace(PPO, clip_value=clip_value)
    loss, metrics = jax.jit(lambda p, b: ppo_loss(p, ppo_forward, Categorical(), b, config))(PPO_PARAMS, ppo_batch())
    expected = ppo_oracle(config)
    np.testing.assert_allclose(loss, expected["loss"], rtol=1e-5)
    for name in ("pg_loss", "value_loss", "entropy", "clip_fraction", "approx_kl"):
        np.testing.assert_allclose(metrics[name], expected[name], rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(metrics["reconstruction_loss"], RECONSTRUCTION)
    np.testing.assert_allclose(metrics["loss"], loss)
    # The batch is one where each clip changes the number: the test sees if one is lost.
    assert not np.isclose(expected["pg_loss"], -np.mean(RATIO * ADVANTAGE))
    assert not np.isclose(
        ppo_oracle(dataclasses.replace(config, clip_value=not clip_value))["value_loss"], expected["value_loss"]
    )


def test_ppo_loss_without_a_latent_has_no_reconstruction_term():
    config = dataclasses.replace(PPO, latent_size=0)
    loss, metrics = ppo_loss(PPO_PARAMS, ppo_forward, Categorical(), ppo_batch(), config)
    np.testing.assert_allclose(loss, ppo_oracle(config)["loss"], rtol=1e-5)
    assert "reconstruction_loss" not in metrics


def test_ppo_loss_gradient_follows_the_clip():
    """Where the clip binds (ratio 0.5 with a negative advantage, 1.5 with a positive one), the
    surrogate gives that sample's logits no gradient; inside it (ratio 1.1) it does."""
    config = dataclasses.replace(PPO, value_coef=0.0, entropy_coef=0.0)
    grads = jax.grad(lambda p: ppo_loss(p, ppo_forward, Categorical(), ppo_batch(), config)[0])(PPO_PARAMS)
    np.testing.assert_array_equal(grads["logits"][:2], 0.0)
    assert np.abs(grads["logits"][2]).max() > 1e-3


# --- IMPALA ----------------------------------------------------------------------------

T, B, A = 3, 2, 2
RNG = np.random.default_rng(0)
I_LOGITS = RNG.normal(size=(T, B, A)).astype(np.float32)
I_ACTION = np.array([[0, 1], [1, 1], [0, 0]], np.int32)
I_VALUE = RNG.normal(size=(T + 1, B)).astype(np.float32)  # V(x_0) .. V(x_T)
I_REWARD = np.array([[1.0, 0.0], [0.5, -1.0], [2.0, 1.0]], np.float32)
# log(pi / mu): ratios from 0.4 to 2.7, so both of V-trace's clips (at 1) bind somewhere
I_LOG_RHO = np.array([[0.5, -0.9], [1.0, 0.2], [-0.3, 0.0]], np.float32)
IMPALA = ImpalaConfig(
    gamma=0.9,
    vtrace_lambda=0.8,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    value_coef=0.7,
    entropy_coef=0.3,
    latent_size=4,
    shared_torso=True,
    reconstruction_coef=2.0,
)


def impala_traj() -> Trajectory:
    log_pi = log_softmax(I_LOGITS)[np.arange(T)[:, None], np.arange(B)[None], I_ACTION]
    false = jnp.zeros((T, B), bool)
    return Trajectory(
        jnp.zeros((T, B, 1)),
        jnp.asarray(I_ACTION),
        jnp.asarray(I_REWARD),
        false,
        false,
        jnp.zeros((T, B, 1)),
        {"log_prob": jnp.asarray(log_pi - I_LOG_RHO)},
    )


def impala_outputs(params, traj):
    return params["logits"], params["value"][:-1], params["value"][1:], params["reconstruction"]


I_PARAMS = {"logits": jnp.asarray(I_LOGITS), "value": jnp.asarray(I_VALUE), "reconstruction": jnp.float32(0.25)}


def impala_oracle(config: ImpalaConfig) -> dict[str, float]:
    """Espeholt et al. 2018, eq. 1 (by its recursion) and section 4.2, all columns at once."""
    rho = np.exp(I_LOG_RHO)
    rho_bar, c = np.minimum(config.clip_rho_threshold, rho), config.vtrace_lambda * np.minimum(1.0, rho)
    gamma, v = config.gamma, I_VALUE
    delta = rho_bar * (I_REWARD + gamma * v[1:] - v[:-1])
    vs_minus_v = np.zeros((T + 1, B), np.float32)
    for t in reversed(range(T)):
        vs_minus_v[t] = delta[t] + gamma * c[t] * vs_minus_v[t + 1]
    vs = v + vs_minus_v  # v_T = V(x_T): the bootstrap
    # the policy gradient's Q estimate bootstraps from v_{s+1} mixed with V(x_{s+1}) by lambda
    # (rlax's `vtrace_td_error_and_advantage`; the paper's with lambda 1)
    bootstrap = config.vtrace_lambda * vs[1:] + (1 - config.vtrace_lambda) * v[1:]
    advantage = np.minimum(config.clip_pg_rho_threshold, rho) * (I_REWARD + gamma * bootstrap - v[:-1])
    log_pi = log_softmax(I_LOGITS)[np.arange(T)[:, None], np.arange(B)[None], I_ACTION]
    pg = -np.mean(log_pi * advantage)
    value = 0.5 * np.mean(vs_minus_v[:-1] ** 2)
    p = np.exp(log_softmax(I_LOGITS))
    entropy = np.mean(-np.sum(p * np.log(p), -1))
    loss = pg + config.value_coef * value - config.entropy_coef * entropy
    if config.latent_size > 0:
        loss += config.reconstruction_coef * 0.25
    return {
        "loss": loss,
        "pg_loss": pg,
        "value_loss": value,
        "entropy": entropy,
        "rho_clip_fraction": np.mean(rho > config.clip_rho_threshold),
        "approx_kl": np.mean(np.expm1(I_LOG_RHO) - I_LOG_RHO),
    }


@pytest.mark.parametrize("latent_size", [4, 0])
def test_impala_loss_matches_vtrace_by_hand(latent_size):
    config = dataclasses.replace(IMPALA, latent_size=latent_size)
    loss, metrics = jax.jit(lambda p, traj: impala_loss(p, impala_outputs, traj, config))(I_PARAMS, impala_traj())
    expected = impala_oracle(config)
    np.testing.assert_allclose(loss, expected["loss"], rtol=1e-5)
    for name in ("pg_loss", "value_loss", "entropy", "rho_clip_fraction", "approx_kl"):
        np.testing.assert_allclose(metrics[name], expected[name], rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(metrics["loss"], expected["loss"], rtol=1e-5)
    latent = {"reconstruction_loss"} if latent_size > 0 else set()
    assert set(metrics) == {"loss", "pg_loss", "value_loss", "entropy", "approx_kl", "rho_clip_fraction", *latent}
    if latent_size > 0:
        np.testing.assert_allclose(metrics["reconstruction_loss"], 0.25)


@pytest.mark.costly
def test_impala_policy_gradient_does_not_flow_through_the_advantages():
    """Only the log-probabilities carry the policy term's gradient: with the value and entropy
    terms off, the values get none (V-trace's advantages are constants)."""
    config = dataclasses.replace(IMPALA, value_coef=0.0, entropy_coef=0.0, latent_size=0)
    grads = jax.grad(lambda p: impala_loss(p, impala_outputs, impala_traj(), config)[0])(I_PARAMS)
    np.testing.assert_array_equal(grads["value"], 0.0)
    assert np.abs(grads["logits"]).max() > 1e-3
