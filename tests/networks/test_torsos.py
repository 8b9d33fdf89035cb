"""The Atari torsos, initialised and run: the papers' layer shapes (parameter counts in closed
form) on uint8 frames, and an agent built on each acting and updating."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import PPOConfig, make_agent
from podracer.agents.networks import make_torso
from podracer.types import DiscreteSpec, ObsSpec, Trajectory

pytestmark = pytest.mark.timeout(180)

FRAMES = ObsSpec((84, 84, 4), np.dtype(np.uint8))


def conv(kernel: int, channels_in: int, channels_out: int) -> int:
    return kernel * kernel * channels_in * channels_out + channels_out


# Nature DQN (Mnih et al. 2015): 8x8/4 -> 20x20x32, 4x4/2 -> 9x9x64, 3x3/1 -> 7x7x64, Dense 512.
NATURE = conv(8, 4, 32) + conv(4, 32, 64) + conv(3, 64, 64) + (7 * 7 * 64 * 512 + 512)
# IMPALA "deep" (Espeholt et al. 2018): per stage a 3x3 conv, a 3x3/2 max-pool (84 -> 42 -> 21
# -> 11) and 2 residual blocks of two 3x3 convs; 16, 32, 32 channels; Dense 256.
IMPALA = sum(conv(3, c_in, c) + 4 * conv(3, c, c) for c_in, c in ((4, 16), (16, 32), (32, 32))) \
    + (11 * 11 * 32 * 256 + 256)


def count(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


@pytest.mark.slow
@pytest.mark.parametrize("torso, size, features", [("nature_cnn", NATURE, 512), ("impala_cnn", IMPALA, 256)])
def test_torso_shapes_and_parameter_count(torso, size, features):
    net = make_torso(torso, (64,), "relu", FRAMES)
    frames = np.random.default_rng(0).integers(0, 256, (2,) + FRAMES.shape, dtype=np.uint8)
    params = jax.jit(net.init)(jax.random.key(0), frames[:1])
    assert count(params) == size
    out = np.asarray(jax.jit(net.apply)(params, frames))
    assert out.shape == (2, features) and out.dtype == np.float32
    assert np.isfinite(out).all() and (out >= 0).all() and (out > 0).any()  # relu features, not all dead
    assert not np.allclose(out[0], out[1])  # they see the frames
    # Every layer takes part: each kernel and bias gets a gradient.
    grads = jax.jit(jax.grad(lambda p: jnp.sum(net.apply(p, frames) ** 2)))(params)
    assert min(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)) > 0


@pytest.mark.slow
def test_ppo_with_a_cnn_torso_acts_and_learns():
    """PPO on frames with the Atari presets' shared Nature CNN torso: `act` samples valid
    actions with finite log-probabilities and values, and one update moves every layer."""
    config = PPOConfig(torso="nature_cnn", shared_torso=True, num_epochs=1, num_minibatches=1, learning_rate=1e-3)
    agent = make_agent(config, FRAMES, DiscreteSpec(6), num_updates=4, axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(0))
    T, B = 2, 2
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 256, (T, B) + FRAMES.shape, dtype=np.uint8)
    action, extras = jax.jit(jax.vmap(agent.act, in_axes=(None, 0, 0)))(
        state.params, obs, jax.random.split(jax.random.key(1), T))
    assert action.shape == (T, B) and ((0 <= action) & (action < 6)).all()
    assert np.isfinite(extras["log_prob"]).all() and np.isfinite(extras["value"]).all()
    traj = Trajectory(obs, action, rng.normal(size=(T, B)).astype(np.float32), np.zeros((T, B), bool),
                      np.zeros((T, B), bool), rng.integers(0, 256, (T, B) + FRAMES.shape, dtype=np.uint8), extras)
    new, metrics = jax.jit(agent.update)(state, traj, jax.random.key(2))
    assert np.isfinite(float(metrics["loss"]))
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), new.params, state.params)
    assert min(jax.tree.leaves(moved)) > 0, moved  # every kernel and bias took a step
    assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(new.params))


@pytest.mark.parametrize("torso", ["NatureCNN", pytest.param("ImpalaCNN", marks=pytest.mark.slow)])
@pytest.mark.costly
def test_cnn_torsos_scale_uint8_frames_only(torso):
    """uint8 frames are scaled to [0, 1]; float inputs (frames already scaled, or
    observations normalised by `--agent.normalize-observations`) are used as they are."""
    from podracer import networks

    module = getattr(networks, torso)()
    frames = jax.random.randint(jax.random.key(0), (2, 84, 84, 4), 0, 256).astype(jnp.uint8)
    params = module.init(jax.random.key(1), frames)
    scaled = frames.astype(jnp.float32) / 255.0
    np.testing.assert_allclose(module.apply(params, scaled), module.apply(params, frames), rtol=1e-5, atol=1e-6)
