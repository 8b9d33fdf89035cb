"""MuZero's loss: gradient scaling in the unroll, n-step targets bootstrapped from search
values, episode ends (termination, truncation, absorbing states) and masks, by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.muzero import MuZeroConfig
from podracer.agents.muzero.losses import (
    UnrollTargets,
    muzero_loss,
    scale_gradient,
    unroll_model,
    unroll_targets,
)
from podracer.agents.muzero.networks import make_network
from podracer.types import ObsSpec

K, N, GAMMA = 2, 2, 0.5  # unroll steps, TD steps: sequences of K + N + 1 = 5 steps
REWARD = jnp.array([1.0, 2.0, 4.0, 8.0, 16.0])
ROOT_VALUE = jnp.array([10.0, 20.0, 30.0, 40.0, 50.0])
POLICY = jax.nn.softmax(jnp.arange(10.0).reshape(5, 2))


def targets(terminated=(), truncated=(), final_value=7.0, absorbing=True) -> UnrollTargets:
    term = jnp.zeros(5, bool).at[jnp.array(terminated, int)].set(True) if terminated else jnp.zeros(5, bool)
    trunc = jnp.zeros(5, bool).at[jnp.array(truncated, int)].set(True) if truncated else jnp.zeros(5, bool)
    final = jnp.where(trunc, final_value, 0.0)
    return jax.jit(unroll_targets, static_argnums=(6, 7, 8, 9))(
        REWARD, term, trunc, ROOT_VALUE, final, POLICY, GAMMA, N, K, absorbing)


def test_scale_gradient():
    x = jnp.array([1.0, -2.0])
    np.testing.assert_array_equal(scale_gradient(x, 0.5), x)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(scale_gradient(x, 0.5) ** 2))(x), 0.5 * 2 * x)


def test_unroll_scales_the_gradient_through_each_dynamics_step():
    """With identity dynamics, the value predicted after k steps has gradient 1/2^(k-1)
    with respect to the observation (k >= 1): the paper's scaling at the dynamics input."""
    M, steps = 3, 4
    represent = lambda obs: obs  # noqa: E731
    dynamics = lambda h, a: (h, jnp.stack([h[:, 0], a.astype(jnp.float32)], -1))  # noqa: E731
    predict = lambda h: (h, h)  # noqa: E731
    obs = jnp.ones((M, 2))
    actions = jnp.zeros((steps, M), jnp.int32)
    policy, value, reward = unroll_model(represent, dynamics, predict, obs, actions, 0.5)
    assert policy.shape == (steps + 1, M, 2) and value.shape == (steps + 1, M, 2) and reward.shape == (steps, M, 2)
    for k in range(steps + 1):
        grad = jax.grad(lambda o, k=k: jnp.sum(unroll_model(represent, dynamics, predict, o, actions, 0.5)[1][k]))(obs)
        np.testing.assert_allclose(grad, 0.5 ** max(k - 1, 0))


def test_targets_without_episode_end():
    t = targets()
    # z_k = r_k + g r_{k+1} + g^2 root_value[k + 2]
    np.testing.assert_allclose(t.value, [1 + 1 + 0.25 * 30, 2 + 2 + 0.25 * 40, 4 + 4 + 0.25 * 50])
    np.testing.assert_allclose(t.reward, [1, 2])
    np.testing.assert_allclose(t.policy, POLICY[:3])
    for mask in (t.value_mask, t.reward_mask, t.policy_mask):
        np.testing.assert_array_equal(mask, 1.0)


def test_termination_inside_the_unroll_absorbs_or_masks():
    """Terminated after step 0: state 0's target is r_0 (no bootstrap); states 1 and 2 are
    past the end: absorbing (value 0, reward 0, weighted) or masked; no policy target."""
    t = targets(terminated=(0,))
    np.testing.assert_allclose(t.value, [1, 0, 0])
    np.testing.assert_array_equal(t.value_mask, [1, 1, 1])
    np.testing.assert_allclose(t.reward, [1, 0])
    np.testing.assert_array_equal(t.reward_mask, [1, 1])
    np.testing.assert_array_equal(t.policy_mask, [1, 0, 0])
    masked = targets(terminated=(0,), absorbing=False)
    np.testing.assert_array_equal(masked.value_mask, [1, 0, 0])
    np.testing.assert_array_equal(masked.reward_mask, [1, 0])
    np.testing.assert_array_equal(masked.policy_mask, [1, 0, 0])


def test_truncation_bootstraps_from_the_final_observation_and_masks_past_it():
    """Truncated after step 1 (final value 7): z_0 = r_0 + g r_1 + g^2 7, z_1 = r_1 + g 7;
    state 2 is past the end: masked even with absorbing states (the episode went on)."""
    t = targets(truncated=(1,))
    np.testing.assert_allclose(t.value[:2], [1 + 1 + 0.25 * 7, 2 + 0.5 * 7])
    np.testing.assert_array_equal(t.value_mask, [1, 1, 0])
    np.testing.assert_array_equal(t.reward_mask, [1, 1])
    np.testing.assert_array_equal(t.policy_mask, [1, 1, 0])


def test_termination_after_the_unroll_cuts_the_n_step_return():
    t = targets(terminated=(3,))
    # z_2 = r_2 + g r_3, the episode ends after step 3: no bootstrap.
    np.testing.assert_allclose(t.value, [1 + 1 + 0.25 * 30, 2 + 2 + 0.25 * 40, 4 + 4])
    np.testing.assert_array_equal(t.value_mask, 1.0)


@pytest.mark.timeout(180)
def test_loss_shapes_masks_and_step_scaling():
    """Masked entries get no gradient; the terms of unroll steps k >= 1 weigh 1/K of step 0's."""
    M, A, V = 4, 3, 11
    keys = jax.random.split(jax.random.key(0), 3)
    value_logits = jnp.broadcast_to(jax.random.normal(keys[0], (1, M, V)), (K + 1, M, V))
    policy_logits = jnp.broadcast_to(jax.random.normal(keys[1], (1, M, A)), (K + 1, M, A))
    reward_logits = jax.random.normal(keys[2], (K, M, V))
    mask = jnp.ones((K + 1, M)).at[2, 1].set(0.0)
    t = UnrollTargets(value=jnp.full((K + 1, M), 3.0), value_mask=mask, reward=jnp.ones((K, M)),
                      reward_mask=jnp.ones((K, M)).at[1, 2].set(0.0),
                      policy=jnp.full((K + 1, M, A), 1.0 / A), policy_mask=mask)
    loss_fn = jax.jit(lambda p, v, r: muzero_loss(p, v, r, t, 10.0, value_coef=0.25))
    loss, metrics = loss_fn(policy_logits, value_logits, reward_logits)
    assert loss.shape == () and np.isfinite(loss)
    assert set(metrics) >= {"loss", "value_loss", "policy_loss", "reward_loss"}
    grads = jax.grad(lambda *xs: loss_fn(*xs)[0], argnums=(0, 1, 2))(policy_logits, value_logits, reward_logits)
    for grad in grads[:2]:
        np.testing.assert_array_equal(grad[2, 1], 0.0)  # past an episode end
        np.testing.assert_allclose(grad[1], grad[0] / K, rtol=1e-5, atol=1e-7)
        assert np.abs(grad[0]).max() > 1e-4
    np.testing.assert_array_equal(grads[2][1, 2], 0.0)
    assert np.abs(grads[2][0]).max() > 1e-4


@pytest.mark.timeout(180)
@pytest.mark.costly
def test_unroll_of_the_network_has_the_right_shapes():
    config = MuZeroConfig(hidden_sizes=(8,), latent_size=6, dynamics_hidden_sizes=(8,), prediction_hidden_sizes=(8,),
                          num_bins=9)
    network = make_network(config, ObsSpec((5, 4), jnp.float32), 3)
    params = network.init(jax.random.key(0), jnp.zeros((1, 5, 4)), jnp.zeros((1,), jnp.int32))
    apply = lambda method: lambda *xs: network.apply(params, *xs, method=method)  # noqa: E731
    out = jax.jit(lambda obs, actions: unroll_model(apply(type(network).represent), apply(type(network).dynamics),
                                                    apply(type(network).predict), obs, actions, 0.5))(
        jnp.ones((7, 5, 4)), jnp.zeros((5, 7), jnp.int32))
    assert [x.shape for x in out] == [(6, 7, 3), (6, 7, 9), (5, 7, 9)]
