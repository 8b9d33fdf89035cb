"""MuZero's replay across a restart of its environments (Sebulba's resume restores the
buffers but not the environments): no sampled sequence runs from one stream into another."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import make_agent
from podracer.agents.muzero import learning
from podracer.agents.muzero.losses import unroll_targets
from podracer.agents.muzero.networks import MuZeroNetwork, make_network
from podracer.ops import categorical_to_scalar
from podracer.types import Trajectory
from tests.agents.muzero.test_agent import ACTION_SPEC, OBS_SPEC, TINY

T = 4


def rollout(n: int, first_time: tuple[int, ...]) -> Trajectory:
    """The n-th `[T, B]` rollout of environments whose stream started at `first_time[b]`: step
    t of env b observes `(first_time[b] + n T + t, b, 0, 0)` and is followed by the next
    time's; reward 1, root value 0.01 * time; no episode ends."""
    B = len(first_time)
    time = np.asarray(first_time)[None] + n * T + np.arange(T)[:, None]
    env = np.zeros((T, 1)) + np.arange(B)[None]
    obs = np.stack([time, env, 0 * time, 0 * time], -1).astype(np.float32)
    next_obs = obs.copy()
    next_obs[..., 0] += 1
    flags = np.zeros((T, B), bool)
    return Trajectory(obs=obs, action=np.zeros((T, B), np.int32), reward=np.ones((T, B), np.float32),
                      terminated=flags, truncated=flags, next_obs=next_obs,
                      extras={"search_policy": np.full((T, B, 2), 0.5, np.float32),
                              "root_value": 0.01 * time.astype(np.float32)})


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replayed_sequences_end_where_the_environments_restarted():
    """Each environment's last step stored before its restart is marked truncated and
    bootstraps from the value of the observation that followed it (stashed in the buffer), so
    no sampled sequence's value target, reward or unroll runs from one stream into the other;
    a stream that goes on (env 1), or whose last step had ended (env 2, terminated), is left
    alone."""
    config = dataclasses.replace(TINY, unroll_steps=2, td_steps=2, gamma=0.9, learning_starts=10**9, batch_size=16)
    K, n, L, B = 2, 2, 5, 3
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=10, axis_name=None)
    state = agent.init(jax.random.key(0))
    leaves, tree = jax.tree.flatten(state.params)  # perturbed: the value head starts at zero
    keys = jax.random.split(jax.random.key(1), len(leaves))
    state = state.replace(params=jax.tree.unflatten(
        tree, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]))
    network = make_network(config, OBS_SPEC, 2)
    latent = network.apply(state.params, jnp.asarray([[2 * T, 0, 0, 0]], jnp.float32), method=MuZeroNetwork.represent)
    cut_value = float(categorical_to_scalar(network.apply(state.params, latent, method=MuZeroNetwork.predict)[1],
                                            config.value_max)[0])  # of env 0's observation after its last old step
    assert abs(cut_value) > 1e-3

    before, after = (0, 0, 0), (1000 - 2 * T, 0, 2000 - 2 * T)  # envs 0 and 2 restart in rollout 2
    rollouts = [rollout(0, before), rollout(1, before), rollout(2, after), rollout(3, after), rollout(4, after)]
    terminated = rollouts[1].terminated.copy()
    terminated[-1, 2] = True
    rollouts[1] = rollouts[1]._replace(terminated=terminated)
    update = jax.jit(agent.update)
    for i, traj in enumerate(rollouts):
        state, _ = update(state, traj, jax.random.key(i))
    assert float(state.opt_state.gradient_steps.as_float()) == 0  # the parameters the value was taken with
    stored = jax.tree.map(lambda x: np.asarray(x)[0, :5 * T * B].reshape((5, T, B) + x.shape[2:]),
                          state.local.experience)
    expected = np.zeros((5, T, B), bool)
    expected[1, -1, 0] = True  # env 0's last step before its restart
    np.testing.assert_array_equal(stored.truncated, expected)
    np.testing.assert_array_equal(stored.terminated, terminated[None] & (np.arange(5) == 1)[:, None, None])
    want_final = np.where(expected, cut_value, 0.0)
    np.testing.assert_allclose(stored.final_value, want_final, rtol=1e-5, atol=1e-6)

    replay = learning.make_replay(config)
    targets = jax.jit(jax.vmap(lambda *xs: unroll_targets(*xs, config.gamma, n, K, config.absorbing_terminal),
                               in_axes=1, out_axes=1))
    crossings = 0
    for k in range(20):  # several samples: every start is drawn
        items = replay.sample(state.local, jax.random.key(100 + k), B).items
        got = jax.tree.map(np.asarray, targets(items.reward, items.terminated, items.truncated, items.root_value,
                                               items.final_value, items.search_policy))
        time, env = np.asarray(items.obs[..., 0]), np.asarray(items.obs[..., 1])
        assert (env == env[:1]).all()
        for m in range(time.shape[1]):
            jumps = [i for i in range(L - 1) if time[i + 1, m] != time[i, m] + 1]
            join = jumps[0] if jumps else L  # the old stream's last step (env 0: truncated, env 2: terminated)
            crossings += join < L
            for j in range(K + 1):
                if j > join:  # the other stream's: no targets (env 2's absorbing state: value 0)
                    assert got.policy_mask[j, m] == 0 and got.value[j, m] == 0
                    assert got.value_mask[j, m] == (env[0, m] == 2)
                    continue
                steps = min(n, join - j + 1)
                ends = j + steps - 1 == join
                bootstrap = (cut_value if env[0, m] == 0 else 0.0) if ends else 0.01 * (time[j, m] + n)
                want = sum(config.gamma**i for i in range(steps)) + config.gamma**steps * bootstrap
                assert got.value_mask[j, m] == 1 and got.policy_mask[j, m] == 1
                np.testing.assert_allclose(got.value[j, m], want, rtol=1e-5, atol=1e-5)
    assert crossings > 0
