"""DQN's n-step returns across rollout boundaries: every transition learned from has a true
n-step target (shorter only where its episode ended), against a brute-force return over the
uncut stream, and on the buffers the Anakin and Sebulba runners fill."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import DQNConfig, dqn
from podracer.config import Config, EnvConfig
from podracer.envs import JaxEnv, register_jax_env
from podracer.replay import make_replay
from podracer.types import DiscreteSpec, ObsSpec, Trajectory

GAMMA, N = 0.9, 3
NEVER = 10**9  # learning_starts: these tests only fill buffers


def brute_force(reward, terminated, truncated, next_obs, t, b, restarts=()):
    """The n-step target of step `(t, b)` of a stream `[L, B]`, summed by hand: `(return,
    discount, bootstrap obs)`, or None if its successors are not all in the stream yet.
    A restart (a row whose first observation does not follow the one before) cuts it."""
    ret, scale = 0.0, 1.0
    last = t
    for k in range(N):
        j = t + k
        if j >= reward.shape[0]:
            return None
        if k > 0 and j in restarts:
            break
        ret += scale * float(reward[j, b])
        scale *= GAMMA
        last = j
        if terminated[j, b] or truncated[j, b]:
            break
    return ret, 0.0 if terminated[last, b] else scale, next_obs[last, b]


def check_targets(items, stream, B, restarts=()):
    """`items`: the agent's transitions of slots `0, 1, ...` (time-major, `B` environments)
    against the brute-force targets of `stream = (obs, reward, terminated, truncated,
    next_obs)` `[L, B]`. Returns the number of transitions checked."""
    obs, reward, terminated, truncated, next_obs = stream
    checked = 0
    for slot in range(len(items.reward)):
        t, b = divmod(slot, B)
        ret, discount, bootstrap = brute_force(reward, terminated, truncated, next_obs, t, b, restarts)
        np.testing.assert_array_equal(items.obs[slot], obs[t, b])
        np.testing.assert_allclose(items.reward[slot], ret, rtol=1e-5, atol=1e-6, err_msg=f"step {t, b}")
        np.testing.assert_allclose(items.discount[slot], discount, rtol=1e-6, err_msg=f"step {t, b}")
        np.testing.assert_array_equal(items.next_obs[slot], bootstrap, err_msg=f"step {t, b}")
        checked += 1
    return checked


def random_stream(L: int, B: int, seed: int, restart: int | None = None):
    """A stream `[L, B]`: observation `[t, b]` (offset by 1000 from row `restart` on: the
    environments restarted), random rewards, terminations and truncations; `next_obs` is
    the next row's observation, or a final one `[-1 - t, b]` where the episode ended."""
    rng = np.random.default_rng(seed)
    t, b = np.meshgrid(np.arange(L), np.arange(B), indexing="ij")
    shift = np.where(restart is not None and t >= (restart or 0), 1000.0, 0.0)
    obs = np.stack([t + shift, b], -1).astype(np.float32)
    terminated = rng.uniform(size=(L, B)) < 0.08
    truncated = (rng.uniform(size=(L, B)) < 0.06) & ~terminated
    following = np.stack([t + 1 + shift, b], -1).astype(np.float32)
    final = np.stack([-1.0 - t, b], -1).astype(np.float32)
    next_obs = np.where((terminated | truncated)[..., None], final, following)
    return obs, rng.normal(size=(L, B)).astype(np.float32), terminated, truncated, next_obs


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("restart", [None, 24])
def test_n_step_targets_equal_brute_force_over_a_long_stream_cut_into_rollouts(restart):
    """A 60-step stream of 3 environments in rollouts of 4 (n = 3: 2 of every 4 steps would
    end their sum at a rollout boundary if it cut them) through `update`: the transitions it
    samples from equal the brute-force n-step targets of the uncut stream. With the
    environments restarted at row 24 (a resumed Sebulba run), sums stop before it."""
    L, B, T = 60, 3, 4
    config = DQNConfig(n_step=N, gamma=GAMMA, buffer_size=L * B, batch_size=8, learning_starts=NEVER,
                       hidden_sizes=(8,))
    agent = dqn.make_dqn(config, ObsSpec((2,), jnp.float32), DiscreteSpec(2), num_updates=L // T, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    obs, reward, terminated, truncated, next_obs = stream = random_stream(L, B, seed=1, restart=restart)
    for start in range(0, L, T):
        rows = slice(start, start + T)
        traj = Trajectory(obs[rows], np.zeros((T, B), np.int32), reward[rows], terminated[rows], truncated[rows],
                          next_obs[rows], {})
        state, _ = update(state, traj, jax.random.key(start))
    replay = make_replay(config.buffer_size, config.batch_size)
    sampleable = (L - (N - 1)) * B
    items = jax.jit(dqn.transitions_at, static_argnums=(0, 3, 4))(replay, state.local, jnp.arange(sampleable), B, config)
    restarts = () if restart is None else (restart,)
    assert check_targets(jax.device_get(items), stream, B, restarts) == sampleable
    # Only the newest N - 1 steps of each environment are held back from sampling.
    drawn = jax.jit(dqn.sample_transitions, static_argnums=(0, 4, 5))(replay, state.local, jax.random.key(0), 0.4, B,
                                                                      config)
    assert int(jnp.max(drawn.indices)) < sampleable


class Drift(JaxEnv):
    """A test environment with continuous observations `[x, t]`, so that two of them are
    equal only when one continues the other: `x` drifts with the action and noise, the
    reward is `x`, `|x| > 1.5` terminates and episodes are truncated after 5 steps."""

    name = "NStepDrift"

    def reset_env(self, key, params):
        x = jax.random.uniform(key, (), minval=-1.0, maxval=1.0)
        return (x, jnp.zeros(())), jnp.stack([x, 0.0])

    def step_env(self, key, state, action, params):
        x, t = state
        x = x + 0.5 * (action - 0.5) + 0.3 * jax.random.normal(key, ())
        return (x, t + 1), jnp.stack([x, t + 1]), x, jnp.abs(x) > 1.5

    def max_episode_steps(self, params):
        return 5

    def observation_spec(self, params):
        return ObsSpec((2,), jnp.float32)

    def action_spec(self, params):
        return DiscreteSpec(2)


def check_buffer(local, B: int, config: DQNConfig) -> int:
    """One device's buffer, filled by `B` environments without wrapping: every environment's
    steps form one continuous stream (each step starts where the one before ended unless
    that one ended its episode), and the agent's transitions equal the brute-force targets
    of those streams. Returns the number of transitions checked."""
    replay = make_replay(config.buffer_size, config.batch_size)
    size = int(replay.size(local))
    steps = jax.device_get(replay.get(local, jnp.arange(size)))
    rows = size // B
    column = lambda x: np.asarray(x).reshape((rows, B) + np.shape(x)[1:])  # noqa: E731
    obs, reward, terminated, truncated, next_obs, first = (column(x) for x in (
        steps.obs, steps.reward, steps.terminated, steps.truncated, steps.next_obs, steps.first))
    going_on = ~(terminated | truncated)[:-1]
    # One stream per environment: a new one starts only at the first step (a step after an
    # episode's end may be marked too, where a rollout starts: it makes no difference).
    assert first[0].all() and not (first[1:] & going_on).any()
    np.testing.assert_array_equal(next_obs[:-1][going_on], obs[1:][going_on])
    assert terminated.any() and truncated.any()
    sampleable = (rows - (N - 1)) * B
    items = jax.jit(dqn.transitions_at, static_argnums=(0, 3, 4))(replay, local, jnp.arange(sampleable), B, config)
    return check_targets(jax.device_get(items), (obs, reward, terminated, truncated, next_obs), B)


AGENT = DQNConfig(n_step=N, gamma=GAMMA, buffer_size=128, batch_size=8, learning_starts=NEVER, hidden_sizes=(8,),
                  epsilon_start=1.0)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_anakin_buffers_hold_true_n_step_targets_across_rollouts():
    """Anakin, 2 devices with 2 environments each, 12 rollouts of 4 steps: each device's
    buffer holds its environments' continuous streams and the n-step targets of every step
    but the newest 2 of each environment are the brute-force ones."""
    import anakin
    from anakin import AnakinConfig

    register_jax_env("NStepDrift", Drift, overwrite=True)
    config = Config(env=EnvConfig("NStepDrift"), agent=AGENT, total_env_steps=4 * 4 * 12,
                    arch=AnakinConfig(num_envs=4, rollout_length=4, devices=(0, 1), updates_per_call=12))
    local = anakin.train(config).state.agent.local  # [S, D, ...]
    for d in range(2):
        assert check_buffer(jax.tree.map(lambda x, d=d: x[0, d], local), 2, AGENT) == (48 - 2) * 2  # 12 rollouts of 4 steps, the newest 2 held back


class DriftGym(gymnasium.Env):
    """`Drift` as a Gymnasium environment (NumPy), for Sebulba's host actors."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = self.np_random.uniform(-1.0, 1.0), 0
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, action):
        self.x += 0.5 * (int(action) - 0.5) + 0.3 * self.np_random.normal()
        self.t += 1
        return np.array([self.x, self.t], np.float32), float(self.x), abs(self.x) > 1.5, False, {}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_sebulba_buffers_hold_true_n_step_targets_across_rollouts():
    """Sebulba, 2 actor threads of 2 Gymnasium environments each, 2 learner devices (each gets
    one environment of each thread), actors one version behind: each device's buffer holds
    continuous streams per environment, and true n-step targets across the rollouts."""
    from sebulba import SebulbaConfig, train

    gymnasium.register("PodracerNStepDrift-v0", entry_point=DriftGym, max_episode_steps=5)
    config = Config(
        env=EnvConfig("PodracerNStepDrift-v0", backend="gymnasium", max_episode_steps=5), agent=AGENT,
        total_env_steps=4 * 4 * 12,
        arch=SebulbaConfig(num_envs=4, rollout_length=4, actor_devices=(0,), learner_devices=(1, 2),
                           threads_per_actor_device=2, max_policy_lag=1, updates_per_log=12),
    )
    local = jax.device_get(train(config).state.local)  # [D, ...]
    for d in range(2):
        assert check_buffer(jax.tree.map(lambda x, d=d: x[d], local), 2, AGENT) == (48 - 2) * 2  # 12 rollouts of 4 steps, the newest 2 held back
