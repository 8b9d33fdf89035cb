"""MuZero's model (`podracer.agents.muzero.networks`) against a NumPy forward pass of its
parameters: the min-max normalised latent, the residual dynamics on a one-hot action, the
heads, and the torso a config names."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.muzero import MuZeroConfig
from podracer.agents.muzero.networks import MuZeroNetwork, init_params, make_network, normalize_latent
from podracer.config import ConfigError
from podracer.types import ObsSpec

CONFIG = MuZeroConfig(
    hidden_sizes=(5, 4),
    latent_size=6,
    dynamics_hidden_sizes=(7,),
    prediction_hidden_sizes=(3,),
    num_bins=5,
    activation="tanh",
)
A = 3


def normalize_np(x):
    low, high = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
    return (x - low) / (high - low + 1e-8)


def mlp_np(params, x):
    for i in range(len(params)):
        x = np.tanh(x @ params[f"Dense_{i}"]["kernel"] + params[f"Dense_{i}"]["bias"])
    return x


def dense_np(params, x):
    return x @ params["kernel"] + params["bias"]


def test_normalize_latent_scales_each_state_to_the_unit_interval():
    x = np.array([[1.0, 3.0, 2.0], [-4.0, -4.0, -4.0], [0.5, -0.5, 0.0]], np.float32)
    np.testing.assert_allclose(normalize_latent(jnp.asarray(x)), normalize_np(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(normalize_latent(jnp.asarray(x[:1])), [[0.0, 1.0, 0.5]], atol=1e-6)


def test_the_model_is_its_numpy_forward_pass():
    """Representation, dynamics and prediction of an MLP model (tanh, `[2, 3]` observations
    flattened) with every parameter drawn at random (the heads start at zero)."""
    network = make_network(CONFIG, ObsSpec((2, 3), jnp.float32), A)
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda key: init_params(network, key, ObsSpec((2, 3), jnp.float32)), jax.random.key(0))
    params = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32), shapes)
    obs = rng.normal(size=(4, 2, 3)).astype(np.float32)
    action = np.array([0, 2, 1, 2], np.int32)

    @jax.jit
    def run(params, obs, action):
        latent = network.apply(params, obs, method=MuZeroNetwork.represent)
        next_latent, reward = network.apply(params, latent, action, method=MuZeroNetwork.dynamics)
        policy, value = network.apply(params, latent, method=MuZeroNetwork.predict)
        return latent, next_latent, reward, policy, value, network.apply(params, obs, action)

    latent, next_latent, reward, policy, value, called = run(params, obs, action)
    p = jax.tree.map(np.asarray, params["params"])
    latent_np = normalize_np(dense_np(p["encoder"], mlp_np(p["torso"], obs.reshape(4, 6))))
    hidden = mlp_np(p["dynamics_torso"], np.concatenate([latent_np, np.eye(A)[action]], -1))
    next_np = normalize_np(latent_np + dense_np(p["transition"], hidden))
    prediction = mlp_np(p["prediction_torso"], latent_np)
    np.testing.assert_allclose(latent, latent_np, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(next_latent, next_np, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(reward, dense_np(p["reward_head"], hidden), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(policy, dense_np(p["policy_head"], prediction), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, dense_np(p["value_head"], prediction), rtol=1e-4, atol=1e-5)
    # __call__: the prediction at the next state, and the reward
    next_prediction = mlp_np(p["prediction_torso"], next_np)
    expected = (dense_np(p["policy_head"], next_prediction), dense_np(p["value_head"], next_prediction), reward)
    for got, want in zip(called, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert [x.shape for x in (latent, reward, policy, value)] == [(4, 6), (4, 5), (4, 3), (4, 5)]


def test_the_heads_start_at_zero_and_the_policy_near_uniform():
    network = make_network(CONFIG, ObsSpec((6,), jnp.float32), A)
    params = jax.jit(lambda key: init_params(network, key, ObsSpec((6,), jnp.float32)))(jax.random.key(0))["params"]
    for head in ("reward_head", "value_head"):
        np.testing.assert_array_equal(params[head]["kernel"], 0.0)
    assert 0 < float(jnp.max(jnp.abs(params["policy_head"]["kernel"]))) < 0.05
    assert params["encoder"]["kernel"].shape == (4, 6) and params["transition"]["kernel"].shape == (7, 6)


def test_a_conv_torso_reads_grids_with_or_without_a_channel_axis():
    """A `[H, W]` grid is the `[H, W, 1]` one: the same parameters give the same latent."""
    config = MuZeroConfig(torso="conv", conv_channels=(2,), hidden_sizes=(4,), latent_size=6, num_bins=5)
    grid = make_network(config, ObsSpec((3, 4), jnp.float32), A)
    channels = make_network(config, ObsSpec((3, 4, 1), jnp.float32), A)
    params = jax.jit(lambda key: init_params(grid, key, ObsSpec((3, 4), jnp.float32)))(jax.random.key(0))
    assert params["params"]["torso"]["layers_1"]["Conv_0"]["kernel"].shape == (3, 3, 1, 2)
    obs = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    latents = jax.jit(
        lambda params, obs: (
            grid.apply(params, obs, method=MuZeroNetwork.represent),
            channels.apply(params, obs[..., None], method=MuZeroNetwork.represent),
        )
    )(params, obs)
    np.testing.assert_allclose(*latents, rtol=1e-5, atol=1e-6)
    message = "agent.torso 'conv' needs grid observations [H, W] or [H, W, C], got shape (5,)"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        make_network(config, ObsSpec((5,), jnp.float32), A)
