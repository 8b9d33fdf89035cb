"""Continuous actions: the Gaussian policy against distrax, running statistics against
NumPy, box specs and clipping in the JAX and host environments."""

import dataclasses

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import PPOConfig, make_ppo
from podracer.agents.networks import make_actor_critic
from podracer.agents.policies import RAW_ACTION, Categorical, Gaussian, action_size, policy_for
from podracer.config import ConfigError, EnvConfig
from podracer.envs import make_jax_env
from podracer.ops import discounted_returns, gaussian_entropy, gaussian_log_prob
from podracer.ops import running_stats as rs
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec
from tests.support.helpers import refuse_import


def test_gaussian_log_prob_and_entropy_match_distrax(variant):
    keys = jax.random.split(jax.random.key(0), 3)
    mean = jax.random.normal(keys[0], (5, 3))
    log_std = 0.5 * jax.random.normal(keys[1], (5, 3))
    action = mean + 2.0 * jax.random.normal(keys[2], (5, 3))
    reference = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
    np.testing.assert_allclose(variant(gaussian_log_prob)(mean, log_std, action), reference.log_prob(action),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(variant(gaussian_entropy)(mean, log_std), reference.entropy(), rtol=1e-5)
    # A state-independent log-std `[3]` broadcasts against a batch of means.
    shared = log_std[0]
    np.testing.assert_allclose(
        gaussian_log_prob(mean, shared, action),
        distrax.MultivariateNormalDiag(mean, jnp.exp(jnp.broadcast_to(shared, mean.shape))).log_prob(action),
        rtol=1e-5, atol=1e-5)


def test_discounted_returns_hand_computed(variant):
    r = jnp.array([1.0, 2.0, 3.0, 4.0])
    end = jnp.array([False, True, False, False])  # the episode ends with step 1
    np.testing.assert_allclose(variant(discounted_returns)(r, end, 0.5), [1.0, 2.5, 3.0, 5.5])


def test_running_stats_equal_numpy_over_every_batch():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 2)).astype(np.float32) for n in (50, 7, 300)]

    @jax.jit
    def merge_all(batches):
        stats = rs.init_stats((2,))
        for batch in batches:
            stats = rs.update(stats, batch)
        return stats

    stats = merge_all(batches)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(stats.mean, everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.var, everything.var(0), rtol=1e-4)
    np.testing.assert_allclose(stats.count, len(everything), rtol=1e-6)
    normalized = np.asarray(rs.normalize(stats, jnp.asarray(everything)))
    np.testing.assert_allclose(normalized.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(normalized.std(0), 1.0, atol=1e-3)
    assert float(np.max(rs.normalize(stats, np.full((1, 2), 1e6, np.float32), clip=5.0))) == 5.0


BOX = BoxSpec((2,), np.array([-1.0, 0.0], np.float32), np.array([1.0, 0.5], np.float32))


@pytest.mark.costly
def test_gaussian_act_clips_to_the_box_and_keeps_the_raw_sample():
    """`act`'s action lies in the box (per dimension bounds), the unclipped sample travels
    in extras with its own log-probability (and no value: the critic, a network of its own,
    is left to the update); `greedy_act` is the clipped mean."""
    config = PPOConfig(hidden_sizes=(8,), log_std_init=1.0)  # std e: many samples fall outside
    agent = make_ppo(config, ObsSpec((3,), jnp.float32), BOX, num_updates=1)
    params = jax.jit(agent.init)(jax.random.key(0)).params
    # 1024 draws: an action left outside the box 1% of the time passes with p = 0.99**1024 < 4e-5
    obs = jax.random.normal(jax.random.key(1), (1024, 3))
    action, extras = jax.jit(agent.act)(params, obs, jax.random.key(2))
    assert action.shape == (1024, 2) and action.dtype == jnp.float32
    assert np.all(action >= BOX.low) and np.all(action <= BOX.high)
    raw = extras[RAW_ACTION]
    assert np.mean((raw < BOX.low) | (raw > BOX.high)) > 0.3  # clipping did happen
    np.testing.assert_array_equal(action, np.clip(raw, BOX.low, BOX.high))

    network = make_actor_critic("mlp", (8,), "tanh", False, ObsSpec((3,), jnp.float32), BOX, 1.0)
    (mean, log_std), _ = network.apply(params, obs)
    np.testing.assert_allclose(extras["log_prob"], gaussian_log_prob(mean, log_std, raw), rtol=1e-5, atol=1e-5)
    assert "value" not in extras  # the critic has a torso of its own: the update computes V(obs)
    np.testing.assert_allclose(log_std, 1.0)  # state-independent, from log_std_init
    greedy = jax.jit(agent.greedy_act)(params, obs)
    np.testing.assert_allclose(greedy, np.clip(mean, BOX.low, BOX.high), rtol=1e-6, atol=1e-6)
    assert isinstance(policy_for(BOX), Gaussian)


@pytest.mark.parametrize("env_id, low, high, big", [("Pendulum-v1", -2.0, 2.0, 7.0),
                                                    ("MountainCarContinuous-v0", -1.0, 1.0, 3.0)])
def test_gymnax_continuous_envs_report_a_box_and_clip_actions(env_id, low, high, big):
    """MountainCarContinuous charges `0.1 * action^2` on the action it is given: only a
    clip in the adapter makes an out-of-box action cost what the boundary action does."""
    env = make_jax_env(env_id)
    spec = env.action_spec(env.default_params)
    assert isinstance(spec, BoxSpec) and spec.shape == (1,) and (spec.low, spec.high) == (low, high)
    assert env.observation_spec(env.default_params).dtype == jnp.float32
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    _, outside = step(jax.random.key(1), state, jnp.array([big]))
    _, boundary = step(jax.random.key(1), state, jnp.array([high]))
    np.testing.assert_allclose(outside.reward, boundary.reward)
    np.testing.assert_allclose(outside.obs, boundary.obs)


def test_dqn_on_a_box_is_a_config_error_naming_both():
    from anakin import AnakinConfig
    from anakin.runner import setup
    from podracer.agents import DQNConfig
    from podracer.config import Config

    config = Config(env=EnvConfig("Pendulum-v1"), agent=DQNConfig(), arch=AnakinConfig(num_envs=4))
    with pytest.raises(ConfigError, match="dqn does not support.*BoxSpec.*Pendulum-v1"):
        setup(config)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4"])
def test_envpool_mujoco_specs(env_id):
    from podracer.envs.host import host_env_specs

    obs_spec, action_spec = host_env_specs(EnvConfig(env_id))
    sizes = {"HalfCheetah-v4": (17, 6), "Hopper-v4": (11, 3), "Walker2d-v4": (17, 6), "Ant-v4": (27, 8)}[env_id]
    assert obs_spec.shape == (sizes[0],) and obs_spec.dtype == np.float32
    assert isinstance(action_spec, BoxSpec) and action_spec.shape == (sizes[1],)
    np.testing.assert_array_equal(action_spec.low, -1.0)
    np.testing.assert_array_equal(action_spec.high, 1.0)


@pytest.mark.timeout(120)
def test_envpool_mujoco_clips_actions_and_restarts_ended_episodes():
    """HalfCheetah charges its control cost on the action it gets: an out-of-box action
    must cost what the boundary does. Hopper falls within tens of random steps: its
    terminated episodes restart (with a continuous dummy action) into fresh observations."""
    from podracer.envs.host import make_host_env

    rewards = []
    for value in (5.0, 1.0):
        env = make_host_env(EnvConfig("HalfCheetah-v4"), 2, seed=3)
        env.reset()
        env.send(np.full((2, 6), value, np.float32))
        rewards.append(env.recv().timestep.reward)
        env.close()
    np.testing.assert_allclose(rewards[0], rewards[1])
    assert rewards[0].dtype == np.float32

    env = make_host_env(EnvConfig("Hopper-v4"), 4, seed=0)
    rng = np.random.default_rng(0)
    env.reset()
    ended = 0
    for _ in range(300):
        env.send(rng.uniform(-1, 1, (4, 3)).astype(np.float32))
        step = env.recv()
        ts = step.timestep
        assert ts.obs.dtype == np.float32 and ts.obs.shape == (4, 11)
        ended += int(ts.terminated.sum())
        # A restarted Hopper stands upright: its height (obs[0]) is ~1.25.
        np.testing.assert_allclose(ts.obs[ts.terminated, 0], 1.25, atol=0.01)
    env.close()
    assert ended > 0


def test_gymnasium_box_env_reports_a_box_and_clips():
    """Gymnasium's MountainCarContinuous charges `0.1 * action^2` on the action it gets."""
    from podracer.envs.host import host_env_specs, make_host_env

    config = EnvConfig("MountainCarContinuous-v0", backend="gymnasium")
    obs_spec, action_spec = host_env_specs(config)
    assert obs_spec == ObsSpec((2,), np.float32)
    assert action_spec.shape == (1,) and float(action_spec.low[0]) == -1.0 and float(action_spec.high[0]) == 1.0
    rewards = []
    for value in (9.0, 1.0):
        env = make_host_env(config, 2, seed=1)
        env.reset()
        env.send(np.full((2, 1), value, np.float32))
        rewards.append(env.recv().timestep.reward)
        env.close()
    np.testing.assert_allclose(rewards[0], rewards[1])


def test_normalization_options_are_validated():
    with pytest.raises(ConfigError, match="agent.obs_clip"):
        PPOConfig(obs_clip=0.0)
    with pytest.raises(ConfigError, match="agent.reward_clip"):
        dataclasses.replace(PPOConfig(), reward_clip=-1.0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_brax_env_steps_inside_shard_map():
    """The `brax` extra: a Brax environment reports its box and steps (auto-reset and all)
    inside a `shard_map` over 2 devices, as Anakin runs it (Brax's default pipeline fails
    the replication check there)."""
    pytest.importorskip("brax")
    from jax.sharding import PartitionSpec as P

    from podracer import parallel

    env = make_jax_env("brax/inverted_pendulum")
    assert env.action_spec(None) == BoxSpec((1,), -1.0, 1.0)
    assert env.observation_spec(None) == ObsSpec((4,), jnp.float32) and env.max_episode_steps(None) == 1000

    def per_device(keys):
        state, obs = jax.vmap(env.reset)(keys)
        state, ts = jax.vmap(env.step)(keys, state, jnp.full((keys.shape[0], 1), 3.0))
        return obs, ts

    mesh = parallel.make_mesh(jax.devices()[:2], "device")
    obs, ts = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("device"), out_specs=P("device")))(
        jax.random.split(jax.random.key(0), 4))
    assert obs.shape == (4, 4) and ts.obs.shape == (4, 4)
    np.testing.assert_allclose(ts.reward, 1.0)  # still upright after one step
    assert not np.any(ts.terminated | ts.truncated)


def test_discounted_returns_of_a_device_invariant_reward_inside_shard_map():
    """A constant reward (Brax's inverted_pendulum pays 1.0) is device-invariant inside
    `shard_map` while episode ends vary: the running return must still trace."""
    from jax.sharding import PartitionSpec as P

    from podracer import parallel

    def per_device(end):
        return jax.vmap(discounted_returns, in_axes=(1, 1, None), out_axes=1)(jnp.ones((3, 2)), end[0], 0.5)[None]

    mesh = parallel.make_mesh(jax.devices()[:2], "device")
    end = jnp.zeros((2, 3, 2), bool).at[0, 0, 0].set(True)
    returns = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("device"), out_specs=P("device")))(end)
    np.testing.assert_allclose(returns[0, :, 0], [1.0, 1.0, 1.5])
    np.testing.assert_allclose(returns[1, :, 0], [1.0, 1.5, 1.75])


def test_brax_ids_without_brax_name_the_extra(monkeypatch):
    from podracer.envs import UnknownEnvError

    refuse_import(monkeypatch, "brax")
    with pytest.raises(UnknownEnvError, match=r"pip install 'podracer\[brax\]'"):
        make_jax_env("brax/ant")


def test_cli_lists_the_continuous_presets_and_rejects_dqn_on_a_box(capsys, tmp_path):
    from experiments.cli import main

    main(["list"])
    out = capsys.readouterr().out
    assert "ppo-pendulum-anakin" in out and "ppo-halfcheetah-sebulba" in out and "Pendulum-v1" in out
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "dqn-cartpole-anakin", "--env.id", "Pendulum-v1", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "dqn" in err and "BoxSpec" in err and not run_dir.exists()


def test_normalization_keeps_the_legal_action_mask_of_masked_observations():
    """Only a `MaskedObs`'s `obs` is normalised (and merged into the statistics); its mask
    reaches the wrapped agent unchanged."""
    from podracer.agents.normalization import with_normalization
    from podracer.types import Agent, AgentState, MaskedObs, Trajectory

    def act(params, obs, key):  # hands back what it was given
        return jnp.zeros(obs.action_mask.shape[:1], jnp.int32), {"obs": obs.obs, "mask": obs.action_mask}

    inner = Agent(init=lambda key: AgentState({}, (), jnp.zeros((), jnp.int32)), act=act,
                  update=lambda state, traj, key: (state, {}))
    spec = MaskedObs(ObsSpec((2,), jnp.float32), ObsSpec((3,), jnp.bool_))
    agent = with_normalization(inner, spec, normalize_observations=True, obs_clip=10.0, scale_rewards=False,
                               reward_clip=10.0, gamma=0.9, axis_name=None)
    state = agent.init(jax.random.key(0))
    values = 3.0 + 2.0 * jax.random.normal(jax.random.key(3), (4, 5, 2))
    obs = MaskedObs(values, jnp.ones((4, 5, 3), bool).at[..., 1].set(False))
    traj = Trajectory(obs, jnp.zeros((4, 5), jnp.int32), jnp.zeros((4, 5)), jnp.zeros((4, 5), bool),
                      jnp.zeros((4, 5), bool), obs, {})
    state, _ = jax.jit(agent.update)(state, traj, jax.random.key(1))
    np.testing.assert_allclose(state.params.obs_stats.mean, values.reshape(-1, 2).mean(0), rtol=1e-4)
    _, seen = jax.jit(agent.act)(state.params, MaskedObs(values[0], obs.action_mask[0]), jax.random.key(2))
    np.testing.assert_allclose(seen["obs"], rs.normalize(state.params.obs_stats, values[0], 10.0), rtol=1e-5)
    np.testing.assert_array_equal(seen["mask"], obs.action_mask[0])



def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_categorical_samples_with_the_key_and_scores_by_hand():
    """`sample` is `jax.random.categorical` with the given key, as int32, with its
    log-probability; `log_prob`, the batch's mean `entropy` and `mode` (int32 argmax) against
    NumPy's softmax."""
    logits = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32) * 2
    policy, key = Categorical(), jax.random.key(5)

    @jax.jit
    def outputs(logits):
        action, extras = policy.sample(key, logits)
        return {"action": action, "sampled_log_prob": extras["log_prob"], "drawn": jax.random.categorical(key, logits),
                "log_prob": policy.log_prob(logits, action), "entropy": policy.entropy(logits),
                "mode": policy.mode(logits)}

    out = outputs(logits)
    assert out["action"].dtype == jnp.int32 and out["mode"].dtype == jnp.int32
    np.testing.assert_array_equal(out["action"], out["drawn"])
    expected = log_softmax(logits.astype(np.float64))
    rows = np.arange(8)
    np.testing.assert_allclose(out["sampled_log_prob"], expected[rows, out["action"]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["log_prob"], expected[rows, out["action"]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["entropy"], np.mean(-np.sum(np.exp(expected) * expected, -1)), rtol=1e-5)
    np.testing.assert_array_equal(out["mode"], np.argmax(logits, -1))
    action = np.zeros(8, np.int32)
    assert policy.policy_action(action, {"log_prob": None}) is action


def test_gaussian_over_a_matrix_event_sums_every_event_axis_and_clips_in_its_dtype():
    """Over a `[2, 3]` box (event_ndim 2): the sample is `mean + std * normal(key)` clipped,
    the raw one in extras is the loss's action, log-probabilities and entropies are summed
    over both event axes (entropy averaged over the batch), by hand, and clipping keeps a
    bfloat16 action bfloat16."""
    spec = BoxSpec((2, 3), -0.5, np.array([0.5, 1.0, 1.5], np.float32))
    policy = policy_for(spec)
    assert isinstance(policy, Gaussian) and policy.shape == (2, 3) and policy.event_ndim == 2
    for bound, value in ((policy.low, -0.5), (policy.high, [0.5, 1.0, 1.5])):
        assert bound.dtype == np.float32 and bound.shape == (2, 3)
        np.testing.assert_array_equal(bound, np.broadcast_to(np.float32(value), (2, 3)))
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(4, 2, 3)).astype(np.float32)
    log_std = rng.normal(size=(4, 2, 3)).astype(np.float32) * 0.3
    key = jax.random.key(6)

    @jax.jit
    def outputs(mean, log_std):
        action, extras = policy.sample(key, (mean, log_std))
        return {"action": action, "raw": extras[RAW_ACTION], "sampled_log_prob": extras["log_prob"],
                "eps": jax.random.normal(key, mean.shape), "log_prob": policy.log_prob((mean, log_std), mean + 0.5),
                "entropy": policy.entropy((mean, log_std)), "mode": policy.mode((mean, log_std)),
                "bf16": policy.clip(jnp.full((4, 2, 3), 1.25, jnp.bfloat16))}

    out = jax.tree.map(np.asarray, outputs(mean, log_std))
    raw = mean + np.exp(log_std) * out["eps"]
    np.testing.assert_allclose(out["raw"], raw, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out["action"], np.clip(out["raw"], policy.low, policy.high))
    extras = {RAW_ACTION: raw}
    assert policy.policy_action(out["action"], extras) is raw

    def log_prob(action):
        z = (action - mean) / np.exp(log_std)
        return np.sum(-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi), axis=(1, 2))

    np.testing.assert_allclose(out["sampled_log_prob"], log_prob(raw), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["log_prob"], log_prob(mean + 0.5), rtol=1e-5, atol=1e-5)
    entropy = np.sum(log_std + 0.5 * np.log(2 * np.pi * np.e), axis=(1, 2))
    np.testing.assert_allclose(out["entropy"], entropy.mean(), rtol=1e-5)
    np.testing.assert_array_equal(out["mode"], np.clip(mean, policy.low, policy.high))
    assert out["bf16"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(out["bf16"][0].astype(np.float32), [[0.5, 1.0, 1.25]] * 2)
    assert action_size(spec) == 6


def test_policy_for_picks_the_family_or_names_the_spec_it_cannot_serve():
    assert isinstance(policy_for(DiscreteSpec(3)), Categorical)
    with pytest.raises(TypeError) as error:
        policy_for(ObsSpec((2,), jnp.float32))
    assert str(error.value) == f"no policy distribution for action spec {ObsSpec((2,), jnp.float32)!r}"
