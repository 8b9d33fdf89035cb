"""MuZero's loss (`muzero_loss`, and `sequence_loss` on replayed sequences) against an oracle
written in NumPy: the value transform, two-hot targets, cross-entropies, masks, the 1/K
scaling of the unrolled steps and each coefficient."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import ops
from podracer.agents.muzero import MuZeroConfig
from podracer.agents.muzero.learning import ReplayStep
from podracer.agents.muzero.losses import UnrollTargets, muzero_loss, sequence_loss, unroll_model, unroll_targets
from podracer.agents.muzero.networks import MuZeroNetwork, make_network
from podracer.types import ObsSpec

pytestmark = pytest.mark.timeout(180)

K, M, A, V, VALUE_MAX = 2, 3, 2, 5, 10.0


def log_softmax(x):
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def two_hot_of_h(x, eps=1e-3):
    """`two_hot(h(x))` over V evenly spaced points from `-h(VALUE_MAX)` to `h(VALUE_MAX)`."""

    def h(y):
        return np.sign(y) * (np.sqrt(np.abs(y) + 1) - 1) + eps * y

    bound = h(VALUE_MAX)
    position = (np.clip(h(x), -bound, bound) + bound) / (2 * bound) * (V - 1)
    lower = np.clip(np.floor(position), 0, V - 2).astype(int)
    probs = np.zeros(x.shape + (V,))
    np.put_along_axis(probs, lower[..., None], (1 - (position - lower))[..., None], -1)
    np.put_along_axis(probs, lower[..., None] + 1, (position - lower)[..., None], -1)
    return probs


def test_muzero_loss_matches_the_cross_entropies_by_hand():
    rng = np.random.default_rng(0)
    policy_logits = rng.normal(size=(K + 1, M, A)).astype(np.float32)
    value_logits = rng.normal(size=(K + 1, M, V)).astype(np.float32)
    reward_logits = rng.normal(size=(K, M, V)).astype(np.float32)
    targets = UnrollTargets(
        value=np.array([[1.0, -3.0, 7.5], [0.5, 2.0, 0.0], [-0.2, 4.0, 0.0]], np.float32),
        value_mask=np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32),
        reward=np.array([[1.0, 0.0, -2.0], [0.3, 1.0, 0.0]], np.float32),
        reward_mask=np.array([[1, 1, 1], [1, 0, 1]], np.float32),
        policy=jax.nn.softmax(rng.normal(size=(K + 1, M, A))).astype(np.float32),
        policy_mask=np.array([[1, 1, 1], [1, 1, 0], [0, 1, 0]], np.float32),
    )
    coefs = {"value_coef": 0.25, "policy_coef": 1.5, "reward_coef": 0.7}
    (loss, metrics), (default_loss, _) = jax.jit(
        lambda p, v, r, t: (muzero_loss(p, v, r, t, VALUE_MAX, **coefs), muzero_loss(p, v, r, t, VALUE_MAX))
    )(policy_logits, value_logits, reward_logits, jax.tree.map(jnp.asarray, targets))

    scale = np.array([1.0] + [1.0 / K] * K)[:, None]
    value_ce = -np.sum(two_hot_of_h(targets.value) * log_softmax(value_logits), -1)
    reward_ce = -np.sum(two_hot_of_h(targets.reward) * log_softmax(reward_logits), -1)
    policy_ce = -np.sum(np.asarray(targets.policy) * log_softmax(policy_logits), -1)
    value = np.sum(scale * targets.value_mask * value_ce) / M
    policy = np.sum(scale * targets.policy_mask * policy_ce) / M
    reward = np.sum(targets.reward_mask * reward_ce) / (K * M)
    np.testing.assert_allclose(metrics["value_loss"], value, rtol=1e-5)
    np.testing.assert_allclose(metrics["policy_loss"], policy, rtol=1e-5)
    np.testing.assert_allclose(metrics["reward_loss"], reward, rtol=1e-5)
    np.testing.assert_allclose(loss, 0.25 * value + 1.5 * policy + 0.7 * reward, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss"], loss)
    np.testing.assert_allclose(default_loss, 0.25 * value + policy + reward, rtol=1e-5)  # the default coefficients
    # the first state's value, its expectation over the support (h^-1 of the bins), against its target
    error = np.asarray(ops.categorical_to_scalar(jnp.asarray(value_logits[0]), VALUE_MAX)) - targets.value[0]
    np.testing.assert_allclose(metrics["value_error"], np.mean(np.abs(error) * targets.value_mask[0]), rtol=1e-5)
    probs = np.exp(log_softmax(policy_logits[0]))
    np.testing.assert_allclose(metrics["policy_entropy"], np.mean(-np.sum(probs * np.log(probs), -1)), rtol=1e-5)


class LinearModel:
    """A stand-in `MuZeroNetwork` of linear maps (nothing to compile but the loss): latent
    `obs W_r`, dynamics `latent + E[action]` with reward logits `latent W_w`, and policy and
    value logits `latent W_p`, `latent W_v`."""

    def apply(self, params, *xs, method):
        if method is MuZeroNetwork.represent:
            return xs[0] @ params["r"]
        if method is MuZeroNetwork.dynamics:
            latent, action = xs
            return latent + params["e"][action], latent @ params["w"]
        assert method is MuZeroNetwork.predict, method
        return xs[0] @ params["p"], xs[0] @ params["v"]


def test_sequence_loss_reads_the_first_step_and_the_config_with_a_stand_in_network():
    """`sequence_loss` against `muzero_loss` of the unroll from each sequence's first
    observation along its first K actions and the targets the config's TD steps, discount and
    absorbing rule give (none of them the default), and the gradient (the dynamics' gradient
    scale)."""
    config = MuZeroConfig(num_bins=V, value_max=VALUE_MAX, unroll_steps=K, td_steps=2, gamma=0.9, value_coef=0.4,
                          policy_coef=1.3, reward_coef=0.6, absorbing_terminal=False, dynamics_gradient_scale=0.25)
    L, rng = K + config.td_steps + 2, np.random.default_rng(2)
    params = {name: jnp.asarray(rng.normal(size=shape), jnp.float32)
              for name, shape in [("r", (3, 4)), ("e", (A, 4)), ("w", (4, V)), ("p", (4, A)), ("v", (4, V))]}
    items = ReplayStep(
        obs=jnp.asarray(rng.normal(size=(L, M, 3)), jnp.float32),
        action=jnp.asarray(rng.integers(0, A, (L, M)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(L, M)), jnp.float32),
        terminated=jnp.zeros((L, M), bool).at[1, 1].set(True),
        truncated=jnp.zeros((L, M), bool).at[2, 2].set(True),
        search_policy=jax.nn.softmax(jnp.asarray(rng.normal(size=(L, M, A)), jnp.float32)),
        root_value=jnp.asarray(rng.normal(size=(L, M)), jnp.float32),
        final_value=jnp.zeros((L, M), jnp.float32).at[2, 2].set(3.0),
    )
    model = LinearModel()

    def expected(params):
        def apply(method):
            return lambda *xs: model.apply(params, *xs, method=method)

        predictions = unroll_model(apply(MuZeroNetwork.represent), apply(MuZeroNetwork.dynamics),
                                   apply(MuZeroNetwork.predict), items.obs[0], items.action[:K], 0.25)
        targets = jax.vmap(lambda *xs: unroll_targets(*xs, 0.9, 2, K, False), in_axes=1, out_axes=1)(
            items.reward, items.terminated, items.truncated, items.root_value, items.final_value, items.search_policy
        )
        return muzero_loss(*predictions, targets, VALUE_MAX, 0.4, 1.3, 0.6)

    @jax.jit
    def run(params):  # one program: a compile per call would cost more than the checks
        got = jax.value_and_grad(lambda p: sequence_loss(p, model, items, config), has_aux=True)(params)
        return got, jax.value_and_grad(expected, has_aux=True)(params)

    ((loss, metrics), grads), ((want, want_metrics), want_grads) = run(params)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    for name, value in want_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    for name in params:
        np.testing.assert_allclose(grads[name], want_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_sequence_loss_is_muzero_loss_of_the_first_observations_unroll():
    """`sequence_loss` reads each sequence's first observation and first K actions, and
    passes the config's TD steps, discount, gradient scale, support and coefficients."""
    config = MuZeroConfig(
        hidden_sizes=(8,),
        latent_size=6,
        dynamics_hidden_sizes=(8,),
        prediction_hidden_sizes=(8,),
        num_bins=V,
        value_max=VALUE_MAX,
        unroll_steps=K,
        td_steps=2,
        gamma=0.9,
        value_coef=0.4,
        policy_coef=1.3,
        reward_coef=0.6,
    )
    network = make_network(config, ObsSpec((3,), jnp.float32), A)
    params = network.init(jax.random.key(0), jnp.zeros((1, 3)), jnp.zeros((1,), jnp.int32))
    # the heads start at zero (uniform logits, whose cross-entropy is blind to its target)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    L, rng = K + config.td_steps + 1, np.random.default_rng(1)
    items = ReplayStep(
        obs=jnp.asarray(rng.normal(size=(L, M, 3)), jnp.float32),
        action=jnp.asarray(rng.integers(0, A, (L, M)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(L, M)), jnp.float32),
        terminated=jnp.zeros((L, M), bool).at[2, 1].set(True),
        truncated=jnp.zeros((L, M), bool),
        search_policy=jax.nn.softmax(jnp.asarray(rng.normal(size=(L, M, A)), jnp.float32)),
        root_value=jnp.asarray(rng.normal(size=(L, M)), jnp.float32),
        final_value=jnp.zeros((L, M), jnp.float32),
    )
    loss, metrics = jax.jit(lambda p, items: sequence_loss(p, network, items, config))(params, items)

    def apply(method):
        return lambda *xs: network.apply(params, *xs, method=method)

    predictions = unroll_model(
        apply(MuZeroNetwork.represent),
        apply(MuZeroNetwork.dynamics),
        apply(MuZeroNetwork.predict),
        items.obs[0],
        items.action[:K],
        0.5,
    )
    targets = jax.vmap(lambda *xs: unroll_targets(*xs, 0.9, 2, K, True), in_axes=1, out_axes=1)(
        items.reward, items.terminated, items.truncated, items.root_value, items.final_value, items.search_policy
    )
    expected, expected_metrics = muzero_loss(*predictions, targets, VALUE_MAX, 0.4, 1.3, 0.6)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    for name, value in expected_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    other, _ = sequence_loss(params, network, items, dataclasses.replace(config, td_steps=1))
    assert not np.isclose(other, loss)  # td_steps reaches the targets
