"""SAC's and TD3's losses (`sac.sac_critic_loss`, `sac.sac_actor_loss`, the temperature's loss,
`td3.td3_critic_loss`, `td3.td3_actor_loss`) on tiny hand-made batches with stand-in linear
networks (twin critics, `critics.twin_critics`), against oracles written in NumPy; the noise
is drawn from the same keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.continuous import TD3Config
from podracer.agents.continuous.critics import twin_critics
from podracer.agents.continuous.sac import SACModel, sac_actor_loss, sac_critic_loss
from podracer.agents.continuous.td3 import TD3Model, td3_actor_loss, td3_critic_loss
from podracer.ops import continuous_q
from podracer.replay import Transition

pytestmark = pytest.mark.timeout(120)

N, A = 4, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 2.0], np.float32)  # not the unit box, log-volume log 2
OBS = np.array([[0.5], [-1.0], [2.0], [0.0]], np.float32)
NEXT_OBS = np.array([[1.0], [0.3], [-0.5], [1.5]], np.float32)
ACTION = np.array([[1.0, 0.2], [-1.5, 0.9], [0.0, 0.5], [2.0, 0.1]], np.float32)  # in the box
REWARD = np.array([1.0, -0.5, 0.25, 2.0], np.float32)
DISCOUNT = np.array([0.99, 0.0, 0.99, 0.9801], np.float32)
ITEMS = Transition(
    jnp.asarray(OBS), jnp.asarray(ACTION), jnp.asarray(REWARD), jnp.asarray(DISCOUNT), jnp.asarray(NEXT_OBS)
)
KEY = jax.random.key(3)


def critic(params, obs, unit):
    """Twin linear critics: `Q_i(s, a) = c_i s + w_i . a + b_i`, `[2, N]`."""
    return params["c"][:, None] * obs[None, :, 0] + jnp.einsum("ka,na->kn", params["w"], unit) + params["b"][:, None]


def critic_np(params, obs, unit):
    return params["c"][:, None] * obs[None, :, 0] + np.einsum("ka,na->kn", params["w"], unit) + params["b"][:, None]


CRITIC = {
    "c": np.array([1.0, -0.5], np.float32),
    "w": np.array([[1.0, -2.0], [0.5, 3.0]], np.float32),
    "b": np.array([0.1, -0.2], np.float32),
}
TARGET_CRITIC = {
    "c": np.array([0.8, 0.6], np.float32),
    "w": np.array([[-1.0, 1.0], [2.0, 0.5]], np.float32),
    "b": np.array([0.0, 0.3], np.float32),
}


def jnp_tree(tree):
    return jax.tree.map(jnp.asarray, tree)


def from_box(action):
    return 2.0 * (action - LOW) / (HIGH - LOW) - 1.0


# --- SAC -------------------------------------------------------------------------------

ACTOR = {"m": np.array([0.7, -0.4], np.float32), "s": np.array([-0.5, 0.2], np.float32)}


def gaussian_actor(params, obs):
    """`mean = m s`, `log_std = s_param`, each `[N, A]`."""
    return obs * params["m"], jnp.broadcast_to(params["s"], (obs.shape[0], A))


TWIN = twin_critics(None, critic)
SAC_MODEL = SACModel(gaussian_actor, TWIN, jnp.asarray(LOW), jnp.asarray(HIGH), continuous_q.box_log_scale(LOW, HIGH))


def squashed_sample_np(obs, key):
    """The policy's sample with the same noise, and its log-density in the box by the change
    of variables: Gaussian density, minus `log(1 - tanh(u)^2)`, minus `log((high - low) / 2)`."""
    mean, log_std = obs * ACTOR["m"], np.broadcast_to(ACTOR["s"], (obs.shape[0], A))
    u = mean + np.exp(log_std) * np.asarray(jax.random.normal(key, (obs.shape[0], A)))
    gaussian = -0.5 * ((u - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    log_prob = np.sum(gaussian - np.log(1 - np.tanh(u) ** 2), -1) - np.sum(np.log((HIGH - LOW) / 2))
    return np.tanh(u), log_prob


@pytest.mark.parametrize("temperature", [0.2, 0.0])
def test_sac_critic_loss_matches_the_soft_target_by_hand(temperature):
    loss, (q_mean, _) = jax.jit(
        lambda c, t, a, items, alpha, key: sac_critic_loss(c, c, t, a, SAC_MODEL, items, alpha, key)
    )(
        jnp_tree(CRITIC), jnp_tree(TARGET_CRITIC), jnp_tree(ACTOR), ITEMS, jnp.float32(temperature), KEY
    )
    next_unit, next_log_prob = squashed_sample_np(NEXT_OBS, KEY)
    q_t = critic_np(TARGET_CRITIC, NEXT_OBS, next_unit)
    target = REWARD + DISCOUNT * (q_t.min(0) - temperature * next_log_prob)
    q = critic_np(CRITIC, OBS, from_box(ACTION))
    np.testing.assert_allclose(loss, np.mean((q[0] - target) ** 2) + np.mean((q[1] - target) ** 2), rtol=1e-5)
    np.testing.assert_allclose(q_mean, q.mean(), rtol=1e-5)


def test_sac_critic_loss_gives_the_target_and_the_actor_no_gradient():
    grads = jax.grad(
        lambda t, a: sac_critic_loss(jnp_tree(CRITIC), jnp_tree(CRITIC), t, a, SAC_MODEL, ITEMS, 0.2, KEY)[0], argnums=(0, 1)
    )(jnp_tree(TARGET_CRITIC), jnp_tree(ACTOR))
    for leaf in jax.tree.leaves(grads):
        np.testing.assert_array_equal(leaf, 0.0)


def test_sac_actor_and_temperature_losses_match_by_hand():
    temperature, target_entropy, log_alpha = 0.3, -2.0, np.log(0.3)
    loss, log_prob = jax.jit(lambda a, c, obs, alpha, key: sac_actor_loss(a, c, SAC_MODEL, obs, alpha, key))(
        jnp_tree(ACTOR), jnp_tree(CRITIC), jnp.asarray(OBS), jnp.float32(temperature), KEY
    )
    unit, expected_log_prob = squashed_sample_np(OBS, KEY)
    np.testing.assert_allclose(log_prob, expected_log_prob, rtol=1e-5, atol=1e-5)
    q = critic_np(CRITIC, OBS, unit)
    np.testing.assert_allclose(loss, np.mean(temperature * expected_log_prob - q.min(0)), rtol=1e-5)
    # the temperature's loss (eq. 18), on the same log-probabilities
    t_loss, t_grad = jax.value_and_grad(continuous_q.temperature_loss)(jnp.float32(log_alpha), log_prob, target_entropy)
    expected = -np.mean(temperature * (expected_log_prob + target_entropy))
    np.testing.assert_allclose(t_loss, expected, rtol=1e-5)
    np.testing.assert_allclose(t_grad, expected, rtol=1e-5)  # d/d(log alpha) of alpha x is alpha x


# --- TD3 -------------------------------------------------------------------------------

TD3_ACTOR = {"k": np.array([0.9, -0.6], np.float32)}
TARGET_ACTOR = {"k": np.array([1.5, 0.4], np.float32)}


def tanh_actor(params, obs):
    return jnp.tanh(obs * params["k"])


TD3_MODEL = TD3Model(tanh_actor, TWIN, jnp.asarray(LOW), jnp.asarray(HIGH))
TD3 = TD3Config(target_noise=0.5, target_noise_clip=0.3)


def test_td3_critic_loss_matches_the_clipped_double_q_target_by_hand():
    loss, (q_mean, _) = jax.jit(
        lambda c, t, ta, items, key: td3_critic_loss(c, c, t, ta, TD3_MODEL, items, key, TD3)
    )(
        jnp_tree(CRITIC), jnp_tree(TARGET_CRITIC), jnp_tree(TARGET_ACTOR), ITEMS, KEY
    )
    raw = TD3.target_noise * np.asarray(jax.random.normal(KEY, (N, A)))
    noise = np.clip(raw, -TD3.target_noise_clip, TD3.target_noise_clip)
    assert np.any(np.abs(raw) > TD3.target_noise_clip)  # the noise clip binds on this draw
    next_unit = np.clip(np.tanh(NEXT_OBS * TARGET_ACTOR["k"]) + noise, -1.0, 1.0)
    target = REWARD + DISCOUNT * critic_np(TARGET_CRITIC, NEXT_OBS, next_unit).min(0)
    q = critic_np(CRITIC, OBS, from_box(ACTION))
    np.testing.assert_allclose(loss, np.mean((q[0] - target) ** 2) + np.mean((q[1] - target) ** 2), rtol=1e-5)
    np.testing.assert_allclose(q_mean, q.mean(), rtol=1e-5)


def test_td3_actor_loss_is_minus_the_first_critic():
    loss = jax.jit(lambda a, c, obs: td3_actor_loss(a, c, TD3_MODEL, obs))(
        jnp_tree(TD3_ACTOR), jnp_tree(CRITIC), jnp.asarray(OBS)
    )
    q = critic_np(CRITIC, OBS, np.tanh(OBS * TD3_ACTOR["k"]))
    np.testing.assert_allclose(loss, -np.mean(q[0]), rtol=1e-5)
    assert not np.isclose(-np.mean(q[0]), -np.mean(q.min(0)))  # Q1, not the minimum
