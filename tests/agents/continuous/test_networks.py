"""SAC's and TD3's network helpers (`podracer.agents.continuous.networks`): PyTorch's default
initialisation of `dense`, the torso a config names, and the action dimension of a box."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.continuous import SACConfig, TD3Config, networks
from podracer.config import ConfigError


def test_dense_has_the_size_a_bias_and_pytorchs_uniform_kernel():
    """`nn.Linear`'s default: weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)), variance 1/(3 fan_in)."""
    fan_in = 400
    params = networks.dense(300).init(jax.random.key(0), jnp.zeros((1, fan_in)))["params"]
    kernel = np.asarray(params["kernel"])
    assert kernel.shape == (fan_in, 300) and params["bias"].shape == (300,)
    bound = 1.0 / np.sqrt(fan_in)
    assert np.max(np.abs(kernel)) <= bound and np.max(np.abs(kernel)) > 0.99 * bound
    np.testing.assert_allclose(np.var(kernel), 1.0 / (3 * fan_in), rtol=0.02)


@pytest.mark.parametrize("make", [SACConfig, TD3Config], ids=["sac", "td3"])
def test_the_torso_is_the_one_the_config_names(make):
    mlp = networks.make_torso(make(hidden_sizes=(32, 16)))
    assert isinstance(mlp, networks.ReluMLP) and mlp.hidden_sizes == (32, 16)
    # SimBa is as wide as the first hidden size
    simba = networks.make_torso(make(torso="simba", hidden_sizes=(48, 32), simba_blocks=3))
    assert isinstance(simba, networks.SimBa) and (simba.width, simba.blocks) == (48, 3)


def test_action_dim_is_the_size_of_a_rank_1_box():
    assert networks.action_dim((6,)) == 6
    assert type(networks.action_dim(np.array([3])[0:1].shape)) is int
    for shape in [(), (2, 3)]:
        expected = f"env.id must have actions of rank 1 for SAC and TD3 (BoxSpec shape (A,)), got {shape!r}"
        with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
            networks.action_dim(shape)
