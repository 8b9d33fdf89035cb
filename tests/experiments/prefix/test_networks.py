"""PrefixRL's fully convolutional Q-network: the Q-map layout matches the environment's
action index, the parameters fit any width, and the area/delay scalarisation."""

import jax
import jax.numpy as jnp
import numpy as np

from experiments.prefix import graph as G
from experiments.prefix.builders import sklansky
from experiments.prefix.networks import PrefixQNetwork, q_maps_to_actions, scalarize


def test_q_maps_are_laid_out_like_the_actions():
    n = 5
    i, j, channel = np.meshgrid(np.arange(n), np.arange(n), np.arange(4), indexing="ij")
    cells = (1000 * channel + 10 * i + j).astype(np.float32)[None]  # [1, N, N, 4], channel = obj * 2 + kind
    q = np.asarray(q_maps_to_actions(jnp.asarray(cells)))
    assert q.shape == (1, 2, 2 * n * n)
    for objective in range(2):
        for action in range(2 * n * n):
            kind, a, b = G.decode_action(action, n)
            assert q[0, objective, action] == 1000 * (2 * objective + kind) + 10 * a + b


def test_network_is_fully_convolutional_and_scalarises():
    net = PrefixQNetwork(blocks=2, channels=8)
    obs16 = jnp.asarray(G.features(sklansky(16)))[None]
    params = net.init(jax.random.key(0), obs16)
    q16 = net.apply(params, obs16)
    assert q16.shape == (1, 2, 512)
    q8 = net.apply(params, jnp.asarray(G.features(sklansky(8)))[None])  # same parameters, another width
    assert q8.shape == (1, 2, 128) and np.isfinite(q8).all()
    # A cell's Q depends only on its neighbourhood: cells far from a change keep their values.
    changed = G.features(G.apply_action(sklansky(16), 2 * 16 + 1))[None]  # add (2, 1)
    delta = np.abs(np.asarray(net.apply(params, jnp.asarray(changed)) - q16)).reshape(2, 2, 16, 16)
    assert delta[..., 12:, 10:].max() == 0.0 and delta.max() > 0
    mixed = scalarize(q16, jnp.array([0.25]))
    np.testing.assert_allclose(mixed, 0.25 * q16[:, 0] + 0.75 * q16[:, 1], rtol=1e-6)
    np.testing.assert_allclose(scalarize(q16, 1.0), q16[:, 0])
