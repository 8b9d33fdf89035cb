"""Observation normalisation and reward scaling around a recording agent (it hands back what
it was given), against NumPy: the running statistics merged by Chan's update from mean 0,
variance 1 and count 1e-4, the discounted returns restarting after each episode end, and
what `act`, `greedy_act` and the wrapped `update` see."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.normalization import NormalizedParams, with_normalization
from podracer.config import ConfigError
from podracer.types import Agent, AgentState, ObsSpec, Trajectory

T, B, D = 4, 5, 2
OBS_SPEC = ObsSpec((D,), jnp.float32)


def recording_agent(greedy: bool = True) -> Agent:
    """`act`/`greedy_act` hand back the observations (and key and core) they see; `update`
    hands back its trajectory's observations and rewards, and counts its calls in `params`."""

    def act(params, obs, key, *core):
        return jnp.zeros(obs.shape[:1], jnp.int32), {"obs": obs, "key": jax.random.key_data(key), "core": core}

    def update(state, traj, key):
        seen = {"obs": traj.obs, "next_obs": traj.next_obs, "reward": traj.reward, "key": jax.random.key_data(key)}
        return state.replace(params={"updates": state.params["updates"] + 1}), seen

    return Agent(
        init=lambda key: AgentState({"updates": jnp.zeros((), jnp.int32)}, (), jnp.zeros((), jnp.int32)),
        act=act,
        update=update,
        greedy_act=(lambda params, obs, *core: (obs, params["updates"], core)) if greedy else None,
    )


def wrap(
    normalize_observations: bool, scale_rewards: bool, agent: Agent | None = None, spec=OBS_SPEC, **kwargs
) -> Agent:
    options = dict(obs_clip=4.0, reward_clip=3.0, gamma=0.9, axis_name=None) | kwargs
    return with_normalization(
        recording_agent() if agent is None else agent,
        spec,
        normalize_observations=normalize_observations,
        scale_rewards=scale_rewards,
        **options,
    )


def merged(mean, var, count, batch):
    """Chan's update of `(mean, var, count)` with the rows of `batch`, in float64."""
    n, batch_mean, batch_var = len(batch), batch.mean(0), batch.var(0)
    total = count + n
    delta = batch_mean - mean
    m2 = var * count + batch_var * n + delta**2 * count * n / total
    return mean + delta * n / total, m2 / total, total


def trajectory(seed: int) -> Trajectory:
    rng = np.random.default_rng(seed)
    obs = (3.0 + 2.0 * rng.normal(size=(T, B, D))).astype(np.float32)
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    terminated[1, 0] = truncated[2, 1] = True
    return Trajectory(
        obs,
        np.zeros((T, B), np.int32),
        (2.0 * rng.normal(size=(T, B))).astype(np.float32),
        terminated,
        truncated,
        obs + 1.0,
        {},
    )


def test_with_both_off_the_agent_is_the_wrapped_one():
    agent = recording_agent()
    assert wrap(False, False, agent=agent) is agent


def test_structured_observations_cannot_be_normalised_but_their_rewards_can_be_scaled():
    spec = {"a": ObsSpec((2,), jnp.float32), "b": ObsSpec((3,), jnp.float32)}
    with pytest.raises(ConfigError) as error:
        wrap(True, False, spec=spec)
    assert str(error.value) == (
        "agent.normalize_observations: normalisation takes array observations, and these "
        "are structured (dict/NamedTuple); set it to false"
    )
    agent = wrap(False, True, spec=spec)
    assert agent.init(jax.random.key(0)).params.obs_stats is None


def test_observations_are_normalised_with_the_statistics_they_were_collected_with():
    """The first update's trajectory is normalised with the initial statistics (clipped),
    the second with those merged from the first's raw observations (not its next ones);
    `act` and `greedy_act` see the current ones, with their key and core state."""
    agent = wrap(True, False)
    state = agent.init(jax.random.key(0))
    assert isinstance(state.params, NormalizedParams) and state.params.return_stats is None
    stats = state.params.obs_stats
    assert stats.mean.shape == (D,) and float(stats.count) == np.float32(1e-4)
    update = jax.jit(agent.update)
    mean, var, count, largest = np.zeros(D), np.ones(D), 1e-4, 0.0
    for seed in range(2):
        traj = trajectory(seed)
        state, seen = update(state, traj, jax.random.key(seed))
        expected = np.clip((traj.obs - mean) / np.sqrt(var + 1e-8), -4.0, 4.0)
        np.testing.assert_allclose(seen["obs"], expected, rtol=1e-5, atol=1e-5)
        largest = max(largest, np.abs(expected).max())
        np.testing.assert_allclose(
            seen["next_obs"], np.clip((traj.next_obs - mean) / np.sqrt(var + 1e-8), -4, 4), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_array_equal(seen["reward"], traj.reward)
        np.testing.assert_array_equal(seen["key"], jax.random.key_data(jax.random.key(seed)))
        mean, var, count = merged(mean, var, count, traj.obs.reshape(-1, D))
        np.testing.assert_allclose(state.params.obs_stats.mean, mean, rtol=1e-5)
        np.testing.assert_allclose(state.params.obs_stats.var, var, rtol=1e-4)
        np.testing.assert_allclose(state.params.obs_stats.count, count, rtol=1e-6)
        assert int(state.params.network["updates"]) == seed + 1
    assert largest == 4.0  # the clip did bind
    obs = trajectory(5).obs[0]
    _, extras = jax.jit(agent.act)(state.params, obs, jax.random.key(7), jnp.ones(3))
    np.testing.assert_allclose(extras["obs"], np.clip((obs - mean) / np.sqrt(var + 1e-8), -4, 4), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(extras["key"], jax.random.key_data(jax.random.key(7)))
    np.testing.assert_array_equal(extras["core"][0], np.ones(3))
    greedy, updates, core = jax.jit(agent.greedy_act)(state.params, obs, jnp.ones(3))
    assert int(updates) == 2  # the wrapped parameters
    np.testing.assert_allclose(greedy, extras["obs"], rtol=1e-6)
    np.testing.assert_array_equal(core[0], np.ones(3))


def test_rewards_are_scaled_by_the_merged_returns_deviation_and_clipped():
    """Each environment's discounted return restarts after a termination or a truncation;
    the statistics merge this trajectory's returns first and then scale its rewards
    (observations untouched)."""
    agent = wrap(False, True, reward_clip=1.2)
    state = agent.init(jax.random.key(0))
    assert state.params.obs_stats is None and state.params.return_stats.mean.shape == ()
    traj = trajectory(0)
    state, seen = jax.jit(agent.update)(state, traj, jax.random.key(1))
    returns = np.zeros((T, B))
    for t in range(T):
        carry = 0.0 if t == 0 else returns[t - 1] * ~(traj.terminated[t - 1] | traj.truncated[t - 1])
        returns[t] = traj.reward[t] + 0.9 * carry
    mean, var, count = merged(0.0, 1.0, 1e-4, returns.reshape(-1))
    np.testing.assert_allclose(state.params.return_stats.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(state.params.return_stats.var, var, rtol=1e-4)
    np.testing.assert_allclose(seen["reward"], np.clip(traj.reward / np.sqrt(var + 1e-8), -1.2, 1.2), rtol=1e-5)
    assert np.abs(seen["reward"]).max() == np.float32(1.2)  # the clip did bind
    np.testing.assert_array_equal(seen["obs"], traj.obs)
    np.testing.assert_array_equal(seen["next_obs"], traj.next_obs)


def test_statistics_merge_every_devices_data():
    """Over a (vmapped) device axis, both statistics merge the samples of every device."""
    agent = wrap(True, True, axis_name="d")
    state = agent.init(jax.random.key(0))
    trajs = [trajectory(0), trajectory(1)]
    both = jax.tree.map(lambda *x: np.stack(x), *trajs)
    update = jax.vmap(agent.update, in_axes=(None, 0, None), axis_name="d")
    new, _ = jax.jit(update)(state, both, jax.random.key(1))
    mean, var, _ = merged(np.zeros(D), np.ones(D), 1e-4, both.obs.reshape(-1, D))
    np.testing.assert_allclose(new.params.obs_stats.mean[1], mean, rtol=1e-5)
    np.testing.assert_allclose(new.params.obs_stats.var[1], var, rtol=1e-4)
    np.testing.assert_allclose(new.params.return_stats.count[0], 1e-4 + 2 * T * B, rtol=1e-6)


def test_an_agent_without_a_greedy_policy_keeps_none():
    agent = wrap(True, False, agent=recording_agent(greedy=False))
    assert agent.greedy_act is None
