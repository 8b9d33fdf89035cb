"""Replay for V-trace agents (`podracer.replay.mixing`): what an update learns from,
the batch checks, and IMPALA and PPO-with-V-trace with replay on both architectures."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import ImpalaConfig, PPOConfig, algorithms
from podracer.config import ConfigError
from podracer.replay.mixing import check_replay, replayed_per_update, with_replay
from podracer.replay.sequence import max_capacity
from podracer.types import Agent, AgentState, BatchShape, ObsSpec, Trajectory
from tests.support.contract_helpers import anakin_vs_sebulba

pytestmark = pytest.mark.timeout(240)

T, B = 4, 3


def recording_agent() -> Agent:
    """An agent whose update reports the batch it was given: `metrics["obs"]` `[T, B + M, 2]`."""

    def init(key):
        return AgentState(params={"w": jnp.zeros(())}, opt_state=(), update_count=jnp.int32(0))

    def act(params, obs, key):
        return jnp.zeros(obs.shape[0], jnp.int32), {"log_prob": jnp.zeros(obs.shape[0])}

    def update(state, traj, key):
        return state.replace(update_count=state.update_count + 1), {"obs": traj.obs, "reward": traj.reward}

    return Agent(init=init, act=act, update=update, greedy_act=None)


def rollout(n: int) -> Trajectory:
    """The n-th `[T, B]` rollout; the observation of step t of env b is `(n T + t, b)`."""
    time = n * T + np.arange(T)[:, None] + np.zeros((1, B))
    env = np.zeros((T, 1)) + np.arange(B)[None]
    obs = np.stack([time, env], -1).astype(np.float32)
    return Trajectory(obs=obs, action=np.zeros((T, B), np.int32), reward=time.astype(np.float32),
                      terminated=np.zeros((T, B), bool), truncated=np.zeros((T, B), bool), next_obs=obs,
                      extras={"log_prob": np.zeros((T, B), np.float32)})


def test_each_update_learns_from_its_fresh_rollout_and_whole_replayed_sequences():
    """f = 0.5: B fresh then M = B replayed sequences; each replayed one is T consecutive steps
    of one environment (possibly across two rollouts), all from rollouts already added."""
    agent = with_replay(recording_agent(), 0.5, capacity=5 * T * B, obs_spec=ObsSpec((2,), jnp.float32),
                        axis_name=None)
    state = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    seen_starts = set()
    for n in range(8):
        traj = rollout(n)
        state, metrics = update(state, traj, jax.random.key(n))
        obs = np.asarray(metrics["obs"])
        assert obs.shape == (T, 2 * B, 2)
        np.testing.assert_array_equal(obs[:, :B], traj.obs)
        replayed = obs[:, B:]
        np.testing.assert_array_equal(np.diff(replayed[..., 0], axis=0), 1)  # consecutive steps
        np.testing.assert_array_equal(np.diff(replayed[..., 1], axis=0), 0)  # of one environment
        assert replayed[..., 0].max() <= n * T + T - 1  # never from the future
        assert replayed[0, :, 0].min() >= max(0, (n + 1) * T - 5 * T)  # nor overwritten
        np.testing.assert_array_equal(np.asarray(metrics["reward"])[:, B:], replayed[..., 0])
        seen_starts.update(replayed[0, :, 0].tolist())
        assert float(metrics["replay_size"]) == min((n + 1) * T * B, 5 * T * B)
    assert len(seen_starts) > 5  # replay spreads over the buffer, not one sequence


def stream(n: int, first_time: int = 0) -> Trajectory:
    """The n-th `[T, B]` rollout of environments that started at time `first_time`: step t of
    env b observes `(first_time + n T + t, b)` and is followed by `(... + 1, b)`; no episode ends."""
    time = first_time + n * T + np.arange(T)[:, None] + np.zeros((1, B))
    env = np.zeros((T, 1)) + np.arange(B)[None]
    obs = np.stack([time, env], -1).astype(np.float32)
    next_obs = np.stack([time + 1, env], -1).astype(np.float32)
    return Trajectory(obs=obs, action=np.zeros((T, B), np.int32), reward=np.ones((T, B), np.float32),
                      terminated=np.zeros((T, B), bool), truncated=np.zeros((T, B), bool), next_obs=next_obs,
                      extras={"log_prob": np.zeros((T, B), np.float32)})


def test_replayed_sequences_end_where_the_environments_restarted():
    """Sebulba restores the replay buffers on resume but restarts its environments: the steps
    stored before the restart are then followed by another stream's. Each environment's last
    stored step is marked truncated (it bootstraps from its own `next_obs`), so no replayed
    sequence runs a V-trace trace or return from one stream into the other; a stream that goes
    on is left alone."""

    def update(state, traj, key):
        return state.replace(update_count=state.update_count + 1), {
            "obs": traj.obs, "truncated": traj.truncated, "terminated": traj.terminated}

    inner = recording_agent()._replace(update=update)
    agent = with_replay(inner, 0.5, capacity=20 * T * B, obs_spec=ObsSpec((2,), jnp.float32), axis_name=None)
    state = agent.init(jax.random.key(0))
    step = jax.jit(agent.update)
    rollouts = [stream(0), stream(1), stream(0, 1000), stream(1, 1000), stream(2, 1000)]
    crossings = 0
    for n, traj in enumerate(rollouts):
        for k in range(4):  # several samples per buffer state: every start is drawn
            _, metrics = step(state, traj, jax.random.key(10 * n + k))
            replayed = {key: np.asarray(metrics[key])[:, B:] for key in ("obs", "truncated")}
            jumps = np.diff(replayed["obs"][..., 0], axis=0) != 1  # [T - 1, M]: the next step is another stream's
            crossings += int(jumps.sum())
            np.testing.assert_array_equal(replayed["truncated"][:-1][jumps], True)
        state, _ = step(state, traj, jax.random.key(100 + n))
    assert crossings > 0
    stored = jax.tree.map(lambda x: np.asarray(x)[0, :5 * T * B].reshape((5, T, B) + x.shape[2:]),
                          state.local.experience)
    expected = np.zeros((5, T, B), bool)
    expected[1, -1] = True  # the last step before the restart, in every environment
    np.testing.assert_array_equal(stored.truncated, expected)
    assert not stored.terminated.any()


def test_replayed_per_update():
    assert replayed_per_update(0.5, 4) == 4
    assert replayed_per_update(0.75, 4) == 12
    assert replayed_per_update(0.2, 4) == 1
    assert replayed_per_update(0.3, 4) is None


@pytest.mark.parametrize("config, match", [
    (lambda: ImpalaConfig(replay_fraction=1.0), "agent.replay_fraction must be in"),
    (lambda: PPOConfig(replay_fraction=0.5), "agent.replay_fraction needs agent.advantage vtrace"),
    (lambda: ImpalaConfig(replay_capacity=0, replay_fraction=0.5), "agent.replay_capacity must be >= 1"),
])
def test_bad_replay_settings_name_the_field(config, match):
    with pytest.raises(ConfigError, match=match):
        config()


@pytest.mark.parametrize("config, batch, match", [
    (ImpalaConfig(replay_fraction=0.3), BatchShape(8, 4), "agent.replay_fraction must make"),
    (ImpalaConfig(replay_fraction=0.5, num_minibatches=3), BatchShape(8, 4), "sequences of each device's update \\(4 environments \\+ 4 replayed\\)"),
    (ImpalaConfig(replay_fraction=0.5, replay_capacity=16), BatchShape(8, 4), "agent.replay_capacity must hold"),
    (PPOConfig(advantage="vtrace", replay_fraction=0.5, num_minibatches=3), BatchShape(8, 4), "replayed ones"),
])
def test_batch_checks_count_the_replayed_sequences(config, batch, match):
    with pytest.raises(ConfigError, match=match):
        config.check_batch(batch)
    dataclasses.replace(config, replay_fraction=0.5, num_minibatches=4, replay_capacity=10_000).check_batch(batch)


@pytest.mark.slow
@pytest.mark.parametrize("name, extra", [("impala", {}), ("ppo", {"advantage": "vtrace"})])
def test_anakin_and_sebulba_give_the_same_update_with_replay(name, extra):
    """Same trajectories and keys: the same buffers, the same samples, the same parameters."""
    algorithm = algorithms()[name]
    config = dataclasses.replace(algorithm.default_probe_config(), replay_fraction=0.5, replay_capacity=256,
                                 **extra)
    anakin_vs_sebulba(algorithm, "ProbeActionReward", agent_config=config)


@pytest.mark.slow
def test_impala_with_replay_learns_its_probe(tmp_path):
    """IMPALA with half its sequences replayed learns the discrete probe under Anakin; the
    buffer fills to its capacity."""
    from anakin import AnakinConfig
    from experiments.train import train
    from podracer.config import Config, EnvConfig
    from tests.support.contract_helpers import learned_policy_ok

    algorithm = algorithms()["impala"]
    agent = dataclasses.replace(algorithm.default_probe_config(), replay_fraction=0.5, replay_capacity=2048)
    config = Config(env=EnvConfig("ProbeActionReward"), agent=agent, total_env_steps=algorithm.probe_steps,
                    run_dir=str(tmp_path / "run"),
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=50))
    result = train(config, console=False)
    learned_policy_ok(result, config, "discrete")
    assert result.metrics[-1]["replay_size"] == 2048


@pytest.mark.slow
def test_sebulba_run_with_replay_fills_each_learners_buffer(tmp_path, capsys):
    """The command line, Sebulba's actors and learners with replay: trajectories as the actors
    send them go into each learner device's buffer, which is logged as it fills."""
    from experiments.cli import main
    from tests.support.helpers import read_rows

    run_dir = tmp_path / "run"
    main(["train", "impala-cartpole-sebulba", "--agent.replay-fraction", "0.5", "--total-env-steps", "12288",
          "--arch.updates-per-log", "2",
          "--run-dir", str(run_dir), "--log.console", "false", "--log.tensorboard", "false"])
    rows = read_rows(str(run_dir))
    sizes = [row["replay_size"] for row in rows]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0] > 0, sizes
    assert all(np.isfinite(row["loss"]) for row in rows)


def test_check_replay_returns_the_replayed_sequences_and_names_the_field_and_value():
    batch = BatchShape(8, 4)
    assert check_replay(0.5, 32, batch) == 4
    with pytest.raises(ConfigError, match=r"^agent\.replay_fraction must make .*, got 0\.3$"):
        check_replay(0.3, 32, batch)
    with pytest.raises(ConfigError, match=r"^fraction must make"):
        check_replay(0.3, 32, batch, field="fraction")
    limit = max_capacity(4)
    message = (f"agent.replay_capacity must be <= {limit} to sample 4 sequences per update exactly "
               f"(podracer.replay.sequence.max_capacity), got {limit + 1}")
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        check_replay(0.5, limit + 1, batch)
    assert check_replay(0.5, limit, batch) == 4


def test_the_buffer_is_made_with_the_agents_init_key_and_the_shapes_act_returns():
    """`init` and `act` are traced with real keys (an agent that draws needs one), and a stored
    step's action and extras have `act`'s shapes without the batch axis: a vector action `[3]`."""

    def init(key):
        return AgentState(params={"w": jax.random.normal(key, ())}, opt_state=(), update_count=jnp.int32(0))

    def act(params, obs, key):
        n = obs.shape[0]
        return jnp.zeros((n, 3)), {"log_prob": jax.random.uniform(key, (n,)), "logits": jnp.zeros((n, 4))}

    agent = with_replay(recording_agent()._replace(init=init, act=act), 0.5, capacity=12,
                        obs_spec=ObsSpec((2,), jnp.float32), axis_name=None)
    stored = jax.eval_shape(agent.init, jax.random.key(0)).local.experience
    assert stored.action.shape == (1, 12, 3)
    assert stored.extras["log_prob"].shape == (1, 12) and stored.extras["logits"].shape == (1, 12, 4)


def test_the_inner_update_gets_a_key():
    def update(state, traj, key):
        return state, {"draw": jax.random.uniform(key)}

    agent = with_replay(recording_agent()._replace(update=update), 0.5, capacity=5 * T * B,
                        obs_spec=ObsSpec((2,), jnp.float32), axis_name=None)
    key = jax.random.key(0)
    _, metrics = jax.eval_shape(agent.update, jax.eval_shape(agent.init, key), rollout(0), key)
    assert metrics["draw"].shape == () and metrics["draw"].dtype == jnp.float32
