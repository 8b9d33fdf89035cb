"""The compressed latent (`podracer.networks.latent`, wired in `podracer.agents.actor_critic`):
the reconstruction loss, where its gradients go, acting without the decoder, the config
checks, and IMPALA / PPO-with-V-trace training with it (replay and masks included)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer.agents import ImpalaConfig, PPOConfig, make_agent
from podracer.agents.acting import CATEGORICAL
from podracer.agents.actor_critic import make_actor_critic_model
from podracer.agents.minibatches import flatten_time_batch
from podracer.config import ConfigError
from podracer.ops import reconstruction_loss
from podracer.types import DiscreteSpec, MaskedObs, ObsSpec, Trajectory

pytestmark = pytest.mark.timeout(120)

OBS_SPEC, ACTION_SPEC = ObsSpec((3, 3, 2), jnp.float32), DiscreteSpec(3)


def grid_trajectory(seed: int, T: int = 4, B: int = 4, masked: bool = False) -> Trajectory:
    """A random `[T, B]` trajectory of 0/1 grids `[3, 3, 2]` (MinAtar-like), with masks
    (action 2 illegal everywhere) when `masked`."""
    rng = np.random.default_rng(seed)

    def grids():
        x = (rng.uniform(size=(T, B, 3, 3, 2)) < 0.3).astype(np.float32)
        return MaskedObs(x, np.tile(np.array([True, True, False]), (T, B, 1))) if masked else x

    return Trajectory(
        obs=grids(), action=rng.integers(0, 2, size=(T, B)).astype(np.int32),
        reward=rng.normal(size=(T, B)).astype(np.float32), terminated=rng.uniform(size=(T, B)) < 0.1,
        truncated=np.zeros((T, B), bool), next_obs=grids(),
        extras={"log_prob": np.full((T, B), np.log(0.5), np.float32), "value": np.zeros((T, B), np.float32)},
    )


def latent_model(reconstruction: str = "sigmoid_ce", obs_spec=OBS_SPEC):
    return make_actor_critic_model("mlp", (16,), "relu", True, obs_spec, ACTION_SPEC, CATEGORICAL,
                                   latent_size=4, reconstruction=reconstruction)


def test_reconstruction_loss_against_hand_computed_values():
    z = jnp.array([[0.0, 2.0], [-1.0, 3.0]])
    x = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    # mse: mean of (0-1)^2, (2-0)^2, (-1-0)^2, (3-1)^2 = (1 + 4 + 1 + 4) / 4
    np.testing.assert_allclose(reconstruction_loss(z, x, "mse"), 2.5, rtol=1e-6)
    # sigmoid cross-entropy, cell by cell: -log s(0), -log(1 - s(2)), -log(1 - s(-1)), -log s(3)
    cells = [np.log(2.0), np.log1p(np.exp(2.0)), np.log1p(np.exp(-1.0)), np.log1p(np.exp(-3.0))]
    np.testing.assert_allclose(reconstruction_loss(z, x, "sigmoid_ce"), np.mean(cells), rtol=1e-6)
    np.testing.assert_allclose(reconstruction_loss(z, x, "sigmoid_ce"),
                               jnp.mean(optax.sigmoid_binary_cross_entropy(z, x)), rtol=1e-6)
    # large logits stay finite (softplus, not log(sigmoid))
    assert np.isfinite(reconstruction_loss(jnp.array([100.0, -100.0]), jnp.array([0.0, 1.0]), "sigmoid_ce"))


@pytest.mark.parametrize("reconstruction", ["mse", "sigmoid_ce"])
def test_the_model_reconstructs_its_observations_from_the_latent(reconstruction):
    """`train_forward`'s auxiliary loss is the loss of the decoder's output against the
    observation as float; the policy and value are `forward`'s, from the same pass."""
    model = latent_model(reconstruction)
    params = jax.jit(model.init)(jax.random.key(0))
    obs = flatten_time_batch(grid_trajectory(0).obs)
    out, value, loss = model.train_forward(params, obs)
    expected_out, expected_value = model.forward(params, obs)
    np.testing.assert_allclose(out, expected_out, rtol=1e-6)
    np.testing.assert_allclose(value, expected_value, rtol=1e-6)
    decoded = model.network.apply(params, obs, method="with_reconstruction")[2]
    assert decoded.shape == obs.shape
    np.testing.assert_allclose(loss, reconstruction_loss(decoded, obs, reconstruction), rtol=1e-6)
    assert set(params["params"]) == {"encoder", "heads", "decoder"}
    assert params["params"]["encoder"]["latent"]["kernel"].shape == (16, 4)


def test_trajectory_outputs_decode_the_observations_only():
    """IMPALA's `train_outputs` reconstructs `traj.obs` (not `next_obs`) and gives `outputs`'
    policy and values."""
    model = latent_model()
    params = jax.jit(model.init)(jax.random.key(1))
    traj = grid_trajectory(1)
    out, value, next_value, loss = model.train_outputs(params, traj)
    for actual, expected in zip((out, value, next_value), model.outputs(params, traj)):
        np.testing.assert_allclose(actual, expected, rtol=1e-6)
    np.testing.assert_allclose(loss, model.train_forward(params, flatten_time_batch(traj.obs))[2], rtol=1e-6)


@pytest.mark.costly
def test_reconstruction_gradients_reach_the_decoder_and_encoder_not_the_heads():
    model = latent_model()
    params = jax.jit(model.init)(jax.random.key(2))
    obs = flatten_time_batch(grid_trajectory(2).obs)
    grads = jax.jit(jax.grad(lambda p: model.train_forward(p, obs)[2]))(params)["params"]
    norm = optax.tree.norm
    assert float(norm(grads["decoder"])) > 0
    assert float(norm(grads["encoder"]["latent"])) > 0 and float(norm(grads["encoder"]["torso"])) > 0
    assert float(norm(grads["heads"])) == 0.0  # the heads read the latent; they do not reconstruct


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    ImpalaConfig(latent_size=4, shared_torso=True, hidden_sizes=(16,), reconstruction="sigmoid_ce",
                 optimizer="adam", learning_rate=1e-2, anneal_lr=False),
    PPOConfig(latent_size=4, shared_torso=True, hidden_sizes=(16,), reconstruction="sigmoid_ce",
              advantage="vtrace", replay_fraction=0.5, num_minibatches=2, learning_rate=1e-2, anneal_lr=False),
], ids=["impala", "ppo-vtrace-replay"])
def test_update_trains_the_auto_encoder_jointly(config):
    """An update steps the decoder and the encoder, logs `reconstruction_loss`, and repeated
    updates on one batch bring that loss down (with masks, and with replay for PPO)."""
    agent = make_agent(config, MaskedObs(OBS_SPEC, ObsSpec((3,), jnp.bool_)), ACTION_SPEC, num_updates=10,
                       axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(3))
    before = state.params["params"]
    update = jax.jit(agent.update)
    traj = grid_trajectory(3, masked=True)
    losses = []
    for i in range(10):
        state, metrics = update(state, traj, jax.random.key(i))
        losses.append(float(metrics["reconstruction_loss"]))
    after = state.params["params"]
    for part in (("decoder",), ("encoder", "torso"), ("encoder", "latent"), ("heads",)):
        changed = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), _at(before, part), _at(after, part))
        assert max(jax.tree.leaves(changed)) > 0, part
    assert losses[-1] < 0.95 * losses[0], losses
    assert np.isfinite(float(metrics["loss"]))


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def test_acting_is_legal_and_never_runs_the_decoder():
    """With masks, sampled and greedy actions are legal; acting runs the encoder and heads
    only, so NaN decoder parameters change nothing."""
    model = latent_model()
    params = jax.jit(model.init)(jax.random.key(4))
    poisoned = jax.tree.map(lambda x: x, params)
    poisoned["params"]["decoder"] = jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), params["params"]["decoder"])
    obs = jax.tree.map(lambda x: x[0], grid_trajectory(4, B=64, masked=True).obs)
    for p in (params, poisoned):
        action, extras = jax.jit(model.act)(p, obs, jax.random.key(5))
        assert set(np.asarray(action).tolist()) == {0, 1}
        assert np.all(np.isfinite(extras["log_prob"])) and np.all(np.isfinite(extras["value"]))
        assert set(np.asarray(model.greedy_act(p, obs)).tolist()) <= {0, 1}


@pytest.mark.parametrize("config, match", [
    (lambda: ImpalaConfig(latent_size=-1), "agent.latent_size must be >= 0"),
    (lambda: ImpalaConfig(latent_size=8), "agent.shared_torso must be true with a latent"),
    (lambda: ImpalaConfig(latent_size=8, shared_torso=True, core="lstm"), "agent.latent_size must be 0 with a rec"),
    (lambda: PPOConfig(reconstruction_coef=-1.0), "agent.reconstruction_coef must be >= 0"),
    (lambda: PPOConfig(reconstruction_coef=float("nan")), "agent.reconstruction_coef"),
    (lambda: PPOConfig(reconstruction="l1"), "agent.reconstruction must be one of"),
    (lambda: PPOConfig(latent_size=8, shared_torso=True, core="gru"), "agent.latent_size must be 0 with a rec"),
    (lambda: PPOConfig(latent_size=8, shared_torso=True, reconstruction="sigmoid_ce", normalize_observations=True),
     "agent.reconstruction must be 'mse' with normalize_observations"),
])
def test_bad_latent_settings_name_the_field(config, match):
    with pytest.raises(ConfigError, match=match):
        config()


def test_latent_of_a_box_policy_is_gaussian():
    """PPO with a latent on continuous actions: a Gaussian head over the latent."""
    from podracer.agents.policies import policy_for
    from podracer.types import BoxSpec

    spec = BoxSpec((2,), -1.0, 1.0)
    model = make_actor_critic_model("mlp", (8,), "tanh", True, ObsSpec((5,), jnp.float32), spec, policy_for(spec),
                                    latent_size=3)
    params = jax.jit(model.init)(jax.random.key(6))
    (mean, log_std), value, loss = jax.jit(model.train_forward)(params, jnp.ones((7, 5)))
    assert mean.shape == log_std.shape == (7, 2) and value.shape == (7,) and np.isfinite(loss)
    assert "log_std" in params["params"]["heads"]


def test_a_latent_without_a_shared_torso_exits_2_on_the_command_line(tmp_path, capsys):
    """`--agent.latent-size` on a preset with separate torsos: exit 2, one line naming the
    field, before the run directory is written."""
    from tests.support.helpers import assert_one_line_error, run_main

    code, out = run_main(capsys, "train", "impala-breakout-minatar-anakin", "--agent.latent-size", "32",
                         "--run-dir", str(tmp_path / "run"))
    assert_one_line_error(code, out, "agent.shared_torso")
    assert not (tmp_path / "run").exists()

