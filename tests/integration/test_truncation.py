"""Episode ends inside a trajectory, end to end: what the environments and Anakin's rollout
record at a time limit, and what the agents' updates make of it, checked against rlax run
on each episode alone and against values known in closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin import AnakinConfig, train
from anakin.rollout import reset_envs, rollout
from podracer.agents import ImpalaConfig, PPOConfig, make_agent
from podracer.agents.acting import apply_time_major
from podracer.agents.networks import make_actor_critic
from podracer.config import Config, EnvConfig
from podracer.envs import make_jax_env
from podracer.ops import categorical_log_prob
from podracer.types import Agent, DiscreteSpec, ObsSpec, Trajectory
from tests.support.helpers import gae_episode_by_episode, vtrace_episode_by_episode

pytestmark = pytest.mark.timeout(120)

OBS_SPEC, ACTION_SPEC = ObsSpec((3,), jnp.float32), DiscreteSpec(3)
GAMMA, LAMBDA = 0.9, 0.8


def episodic_trajectory(seed: int, T: int = 12, B: int = 4):
    """`(obs, action, reward, terminated, truncated, next_obs)`, NumPy `[T, B, ...]`, as an
    auto-resetting environment gives them: `next_obs[t]` is `obs[t + 1]` where the episode
    went on, and where it ended the final observation, while `obs[t + 1]` starts the next
    episode. Env 0 has truncations in a row and on the last step, env 1 both kinds of end,
    env 2 none, env 3 random ones."""
    rng = np.random.default_rng(seed)
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    truncated[[2, 3, 7, T - 1], 0] = True
    terminated[5, 0] = True
    truncated[4, 1], terminated[9, 1] = True, True
    terminated[:, 3] = rng.uniform(size=T) < 0.15
    truncated[:, 3] = (rng.uniform(size=T) < 0.25) & ~terminated[:, 3]
    obs, next_obs = np.zeros((T, B, 3), np.float32), np.zeros((T, B, 3), np.float32)
    current = rng.normal(size=(B, 3))
    for t in range(T):
        obs[t], next_obs[t] = current, rng.normal(size=(B, 3))
        reset = rng.normal(size=(B, 3))
        current = np.where((terminated[t] | truncated[t])[:, None], reset, next_obs[t])
    action = rng.integers(0, ACTION_SPEC.num_actions, (T, B)).astype(np.int32)
    reward = rng.normal(size=(T, B)).astype(np.float32)
    return obs, action, reward, terminated, truncated, next_obs


def network_outputs(config, params, obs, next_obs, action):
    """The agent's network on the trajectory: `(log_prob [T, B], V(obs), V(next_obs))`."""
    network = make_actor_critic(config.torso, config.hidden_sizes, config.activation, config.shared_torso,
                                       OBS_SPEC, ACTION_SPEC)
    apply = jax.jit(lambda p, x: apply_time_major(network, p, x))
    logits, value = apply(params, obs)
    _, next_value = apply(params, next_obs)
    return (np.asarray(categorical_log_prob(logits, action)), np.asarray(value), np.asarray(next_value))


def per_env(fn, *arrays):
    """`fn` on each env's `[T]` slices, results stacked back to `[T, B]` (tuples apart)."""
    results = [fn(*(a[:, b] for a in arrays)) for b in range(arrays[0].shape[1])]
    if isinstance(results[0], tuple):
        return tuple(np.stack(r, axis=1) for r in zip(*results, strict=True))
    return np.stack(results, axis=1)


def first_update(config, traj_parts, behaviour_noise: float = 0.0, seed: int = 0):
    """One update of a fresh agent on an episodic trajectory whose behaviour policy is the
    agent's own (perturbed by `behaviour_noise` in log-probability): `(metrics, log_prob,
    V(obs), V(next_obs), behaviour log_prob)` with the metrics of that single SGD step, so
    taken at the initial parameters."""
    obs, action, reward, terminated, truncated, next_obs = traj_parts
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=10, axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(seed))
    log_prob, value, next_value = network_outputs(config, state.params, obs, next_obs, action)
    noise = np.random.default_rng(seed + 1).normal(scale=behaviour_noise, size=log_prob.shape)
    behaviour = (log_prob + noise).astype(np.float32)
    traj = Trajectory(obs, action, reward, terminated, truncated, next_obs, {"log_prob": behaviour, "value": value})
    _, metrics = jax.jit(agent.update)(state, traj, jax.random.key(seed + 2))
    return jax.device_get(metrics), log_prob, value, next_value, behaviour


@pytest.mark.slow
def test_ppo_gae_update_uses_each_episode_alone():
    """PPO's update on a trajectory with episode ends of both kinds: its advantages are
    rlax's GAE on each episode alone, bootstrapping a truncated one from V(final obs).
    With one SGD step, unnormalised advantages and on-policy ratios, the step's metrics
    are `pg_loss = -mean(A)` and `value_loss = 0.5 mean(A^2)` at the initial parameters."""
    parts = episodic_trajectory(0)
    config = PPOConfig(num_epochs=1, num_minibatches=1, normalize_advantages=False, gamma=GAMMA,
                       gae_lambda=LAMBDA, hidden_sizes=(16,))
    metrics, _, value, next_value, _ = first_update(config, parts)
    _, _, reward, terminated, truncated, _ = parts
    discount = GAMMA * (1.0 - terminated)
    advantage = per_env(lambda *xs: gae_episode_by_episode(*xs[:4], LAMBDA, xs[4]),
                        reward, discount, value, next_value, terminated | truncated)
    assert np.abs(advantage).mean() > 0.1
    np.testing.assert_allclose(metrics["pg_loss"], -advantage.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean(advantage**2), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo-vtrace", "impala"])
def test_vtrace_updates_use_each_episode_alone(algorithm):
    """PPO with V-trace and IMPALA, off-policy (behaviour log-probabilities perturbed): the
    targets and advantages of their first step are rlax's V-trace on each episode alone."""
    parts = episodic_trajectory(1)
    if algorithm == "impala":
        config = ImpalaConfig(num_epochs=1, num_minibatches=1, gamma=GAMMA, vtrace_lambda=LAMBDA,
                              hidden_sizes=(16,), clip_rho_threshold=1.5, clip_pg_rho_threshold=1.2)
    else:
        config = PPOConfig(advantage="vtrace", num_epochs=1, num_minibatches=1, normalize_advantages=False,
                           gamma=GAMMA, vtrace_lambda=LAMBDA, hidden_sizes=(16,), clip_rho_threshold=1.5,
                           clip_pg_rho_threshold=1.2)
    metrics, log_prob, value, next_value, behaviour = first_update(config, parts, behaviour_noise=0.5)
    _, _, reward, terminated, truncated, _ = parts
    discount = GAMMA * (1.0 - terminated)
    rho = np.exp(log_prob - behaviour)
    errors, pg_advantage = per_env(
        lambda *xs: vtrace_episode_by_episode(*xs[:5], LAMBDA, xs[5], clip_rho=1.5, clip_pg_rho=1.2),
        reward, discount, value, next_value, rho, terminated | truncated)
    assert np.abs(errors).mean() > 0.1
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean(errors**2), rtol=1e-4, atol=1e-5)
    expected_pg = -np.mean(log_prob * pg_advantage) if algorithm == "impala" else -np.mean(pg_advantage)
    np.testing.assert_allclose(metrics["pg_loss"], expected_pg, rtol=1e-4, atol=1e-5)


def test_anakin_rollout_records_the_final_observation_at_a_time_limit():
    """The time-limit probe (observation t / 4, reward 1, truncated every 4 steps) through
    Anakin's rollout: `next_obs` is the successor before the reset (1.0 at the limit),
    `obs` of the next step the fresh start (0.0)."""
    env = make_jax_env("ProbeTimeLimit")
    act = lambda params, obs, key: (jnp.zeros(obs.shape[0], jnp.int32), {})  # noqa: E731
    agent = Agent(init=None, act=act, update=None)
    run = jax.jit(lambda key: rollout(env, None, agent, None, reset_envs(env, None, key, 2), key, 10)[1:])
    traj, stats = run(jax.random.key(0))
    quarter = np.array([0.0, 0.25, 0.5, 0.75, 0.0, 0.25, 0.5, 0.75, 0.0, 0.25], np.float32)
    successor = np.array([0.25, 0.5, 0.75, 1.0, 0.25, 0.5, 0.75, 1.0, 0.25, 0.5], np.float32)
    np.testing.assert_array_equal(traj.obs[..., 0], np.repeat(quarter[:, None], 2, axis=1))
    np.testing.assert_array_equal(traj.next_obs[..., 0], np.repeat(successor[:, None], 2, axis=1))
    np.testing.assert_array_equal(traj.truncated[:, 0], successor == 1.0)
    assert not traj.terminated.any() and (traj.reward == 1.0).all()
    assert int(stats.count) == 4 and float(stats.return_sum) == 16.0  # 2 envs x 2 episodes of 4 steps


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ppo_values_ignore_the_time_limit():
    """On the time-limit probe with gamma 0.5 every state is worth 1 / (1 - 0.5) = 2; an
    agent that took truncation for termination would learn 1 at t = 3 and 1.5 at t = 2."""
    agent = PPOConfig(learning_rate=3e-3, anneal_lr=False, num_minibatches=2, num_epochs=4, entropy_coef=0.0,
                      hidden_sizes=(16,), gamma=0.5)
    config = Config(env=EnvConfig("ProbeTimeLimit"), agent=agent, total_env_steps=16_384,
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=64))
    result = train(config)
    params = jax.tree.map(lambda x: x[0], result.state.agent.params)
    network = make_actor_critic("mlp", (16,), "tanh", False, ObsSpec((1,), jnp.float32), DiscreteSpec(2))
    _, value = jax.jit(network.apply)(params, jnp.array([[0.0], [0.25], [0.5], [0.75]]))
    np.testing.assert_allclose(value, [2.0] * 4, atol=0.1)

