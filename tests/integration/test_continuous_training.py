"""Continuous PPO end to end: the normaliser's parity over devices, learning a continuous
probe under Anakin and Sebulba, the normaliser's checkpoint round trip and `evaluate`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import parallel
from podracer.agents import PPOConfig, make_ppo
from podracer.agents.normalization import NormalizedParams
from podracer.checkpoint import Checkpointer, checkpoint_dir
from podracer.config import CheckpointConfig, Config, EnvConfig, LogConfig
from podracer.ops import running_stats as rs
from podracer.types import BoxSpec, ObsSpec
from tests.support.helpers import leading_axis, random_trajectory, tree_allclose

AXIS = "device"
BOX = BoxSpec((2,), -1.0, 1.0)
NORMALIZED = PPOConfig(hidden_sizes=(16,), num_minibatches=1, num_epochs=2, normalize_observations=True,
                       scale_rewards=True)
# The probe's optimum is the mean action (obs - 2) / 2 = +-0.5; a fast learner finds it.
PROBE_AGENT = PPOConfig(learning_rate=3e-3, anneal_lr=False, num_minibatches=2, num_epochs=4, entropy_coef=0.0,
                        hidden_sizes=(16,), gamma=0.9, normalize_observations=True, scale_rewards=True)
QUIET = {"log": LogConfig(console=False, tensorboard=False), "checkpoint": CheckpointConfig(every_updates=0)}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_normalized_update_on_4_devices_equals_1_device():
    """Observation and return statistics merge every device's data: after one update on 4
    devices each device holds the statistics (and parameters) of the same global batch on 1."""
    obs_spec = ObsSpec((3,), jnp.float32)
    single = make_ppo(NORMALIZED, obs_spec, BOX, num_updates=10, axis_name=None)
    multi = make_ppo(NORMALIZED, obs_spec, BOX, num_updates=10, axis_name=AXIS)
    state = jax.jit(single.init)(jax.random.key(0))
    traj = random_trajectory(single, state.params, jax.random.key(1), T=8, B=8, obs_dim=3, num_actions=0)
    traj = traj._replace(obs=3.0 + 2.0 * traj.obs, next_obs=3.0 + 2.0 * traj.next_obs)  # not already normal
    key = jax.random.key(2)
    expected, expected_metrics = jax.jit(single.update)(state, traj, key)

    mesh = parallel.make_mesh(jax.devices()[:4], AXIS)

    def per_device(state, traj):
        new_state, metrics = multi.update(state, traj, key)
        return jax.tree.map(leading_axis, new_state.params), metrics

    sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), jax.tree.map(lambda _: P(None, AXIS), traj)),
                            out_specs=(P(AXIS), P()))
    replicas, metrics = jax.jit(sharded)(state, traj)
    replicas, expected_params, before = jax.device_get((replicas, expected.params, state.params))
    for d in range(4):
        tree_allclose(jax.tree.map(lambda x, d=d: x[d], replicas), expected_params, rtol=1e-4, atol=1e-6)
    tree_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-4)
    # Not vacuous: the statistics are those of the whole batch, and the network moved.
    stats = expected_params.obs_stats
    np.testing.assert_allclose(stats.count, 64 + 1e-4, rtol=1e-6)
    np.testing.assert_allclose(stats.mean, np.asarray(traj.obs).reshape(-1, 3).mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var, np.asarray(traj.obs).reshape(-1, 3).var(0), rtol=1e-3)
    assert expected_params.return_stats.count > 64
    log_std = expected_params.network["params"]["log_std"]
    assert np.abs(log_std - before.network["params"]["log_std"]).max() > 1e-4


def greedy_actions(agent, params, obs):
    return np.asarray(jax.jit(agent.greedy_act)(params, jnp.asarray(obs, jnp.float32)))


@pytest.fixture(scope="module")
def anakin_run(tmp_path_factory):
    from anakin import AnakinConfig
    from experiments.train import train

    run_dir = tmp_path_factory.mktemp("continuous") / "anakin"
    config = Config(env=EnvConfig("ProbeContinuousAction"), agent=PROBE_AGENT, total_env_steps=16 * 8 * 150,
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0, 1), updates_per_call=50),
                    run_dir=str(run_dir), **QUIET)
    return run_dir, train(config)


@pytest.mark.slow
@pytest.mark.xdist_group("continuous-anakin")
@pytest.mark.timeout(240)
def test_anakin_continuous_ppo_learns_the_probe(anakin_run):
    _, result = anakin_run
    returns = [row["episode_return"] for row in result.metrics]
    assert returns[0] < -0.1 and returns[-1] > -0.02, returns
    params = jax.tree.map(lambda x: x[0], result.state.agent.params)
    np.testing.assert_allclose(greedy_actions(result.agent, params, [[1.0], [3.0]]), [[-0.5], [0.5]], atol=0.1)


@pytest.mark.slow
@pytest.mark.xdist_group("continuous-anakin")
@pytest.mark.timeout(240)
def test_normalizer_checkpoint_round_trip_and_evaluate(anakin_run):
    """The statistics are saved with the parameters, restored exactly, and `evaluate` uses
    them: the probe's observations (1 or 3) only make sense to the network normalised."""
    from experiments.evaluate import episode_returns, evaluate, load_policy, specs
    from experiments.run_dir import load_run_config
    from podracer.envs import make_jax_env

    run_dir, result = anakin_run
    trained: NormalizedParams = jax.tree.map(lambda x: x[0], result.state.agent.params)
    assert np.abs(trained.obs_stats.mean - 2.0).max() < 0.2 and trained.obs_stats.count > 1000
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        restored, _ = checkpoints.restore_part(jax.eval_shape(lambda: result.state.agent.params), ("agent", "params"))
    tree_allclose(restored.obs_stats, result.state.agent.params.obs_stats, rtol=0, atol=0)
    tree_allclose(restored.return_stats, result.state.agent.params.return_stats, rtol=0, atol=0)

    mean = evaluate(str(run_dir), episodes=64, seed=1)
    sample = evaluate(str(run_dir), episodes=64, seed=1, sample=True)
    assert mean["policy"] == "mean" and sample["policy"] == "sample"
    assert mean["mean_return"] > -0.01 and sample["mean_return"] < mean["mean_return"]

    config = load_run_config(str(run_dir))
    env = make_jax_env(config.env.id)
    loaded = load_policy(str(run_dir), config, *specs(config, env), agent_seed=0, sample=False)
    tree_allclose(loaded.params.obs_stats, trained.obs_stats, rtol=0, atol=0)
    identity = loaded.params._replace(obs_stats=rs.init_stats((1,)))
    unnormalized, _ = episode_returns(env, loaded.policy, identity, jax.random.key(1), 64)
    assert unnormalized.mean() < mean["mean_return"] - 0.05


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sebulba_continuous_ppo_learns_the_probe_and_evaluates(tmp_path):
    """Float actions `[B, 1]` through the actor buffers, the host env (Gymnasium Box) and
    the sharded learner (1 actor, 2 learner devices); the run evaluates on host envs."""
    from experiments.evaluate import evaluate
    from experiments.train import train
    from sebulba import SebulbaConfig
    from tests.support.continuous_probe import register

    config = Config(env=EnvConfig(register(), backend="gymnasium"), agent=PROBE_AGENT, total_env_steps=16 * 8 * 120,
                    arch=SebulbaConfig(num_envs=16, rollout_length=8, actor_devices=(0,), learner_devices=(1, 2),
                                       updates_per_log=20),
                    run_dir=str(tmp_path / "sebulba"), **QUIET)
    result = train(config)
    returns = [row["episode_return"] for row in result.metrics]
    assert returns[0] < -0.05 and returns[-1] > -0.02, returns
    params = parallel.local_copy(result.state.params)
    np.testing.assert_allclose(greedy_actions(result.agent, params, [[1.0], [3.0]]), [[-0.5], [0.5]], atol=0.1)
    evaluated = evaluate(str(tmp_path / "sebulba"), episodes=16, seed=0)
    assert evaluated["policy"] == "mean" and evaluated["mean_return"] > -0.01
