"""Every path that produces what a loss consumes, against an oracle independent of it.

A recurrent actor-critic is checked along all of its paths against one oracle: each
environment's column of a trajectory cut into its episodes, each episode stepped through
the network alone from the initial state (the column's first episode from the state the
trajectory carries), with no reset flag at all. Against it: the acting path (`act`, step
by step with the runner's `start` flags), the learner's whole-batch unroll (`outputs`,
logits as well as values), its minibatch path (`prepare`, `minibatches` of whole
sequences, `forward` / `train_forward`), the advantages the recurrent PPO update computes
(GAE, V-trace) and the losses of the first step of recurrent PPO and IMPALA updates, whose
advantages and targets must be rlax's on each episode alone.

An observation wrapper (`EnvConfig.observe`) is checked on what Anakin's rollout records:
`obs` and `next_obs`, final observations at terminations and time limits included.

Observation normalisation and reward scaling (`with_normalization`) are checked on the
trajectory the wrapped agent's update receives: `obs` *and* `next_obs` normalised with the
statistics acting used, rewards scaled by the standard deviation of the discounted return
computed here by a Python loop and NumPy's variance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin.rollout import reset_envs, rollout
from podracer.agents import ImpalaConfig, PPOConfig, actor_critic, make_agent
from podracer.agents.acting import CATEGORICAL
from podracer.agents.networks import make_torso
from podracer.agents.normalization import with_normalization
from podracer.agents.ppo import gae_from_values, vtrace_advantages_and_targets
from podracer.config import EnvConfig
from podracer.envs import make_configured_jax_env
from podracer.networks.recurrent import ResetCore
from podracer.ops import categorical_log_prob
from podracer.types import Agent, AgentState, DiscreteSpec, ObsSpec, Trajectory
from tests.support.helpers import gae_episode_by_episode, vtrace_episode_by_episode

pytestmark = pytest.mark.timeout(120)

T, B, D, A, HIDDEN, CORE = 10, 4, 3, 3, 8, 5
OBS_SPEC, ACTION_SPEC = ObsSpec((D,), jnp.float32), DiscreteSpec(A)
GAMMA, LAMBDA = 0.9, 0.8


def episode_ends(seed: int):
    """`(terminated, truncated, first)`: `[T, B]` ends of both kinds, at the first and last
    steps too, two in a row (a one-step episode), a column with none; `first [B]`: the column
    began an episode at `t = 0` (else it goes on from the carried core state)."""
    rng = np.random.default_rng(seed)
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    terminated[[0, 4], 0], truncated[[T - 1], 0] = True, True
    truncated[[2, 3, 7], 1], terminated[5, 1] = True, True
    terminated[:, 3] = rng.uniform(size=T) < 0.2
    truncated[:, 3] = (rng.uniform(size=T) < 0.2) & ~terminated[:, 3]
    return terminated, truncated, np.array([True, False, False, True])


def recurrent_setup(kind: str, seed: int = 0):
    """The model (as PPO and IMPALA build it), its parameters, the same network built here
    for the oracle to step, and an acted trajectory: observations drawn at random, actions
    and extras from `model.act` stepped one observation at a time with the `start` flags a
    runner records, from a random (non-initial) core state."""
    model = actor_critic.make_actor_critic_model(
        "mlp", (HIDDEN,), "tanh", False, OBS_SPEC, ACTION_SPEC, CATEGORICAL, core=kind, core_size=CORE
    )
    net = actor_critic.RecurrentActorCritic(
        make_torso("mlp", (HIDDEN,), "tanh", OBS_SPEC),
        ResetCore(kind, CORE),
        actor_critic._heads(HIDDEN, "tanh", False, ACTION_SPEC, 0.0),
    )
    params = model.init(jax.random.key(seed))
    rng = np.random.default_rng(seed + 1)
    terminated, truncated, first = episode_ends(seed)
    obs = rng.normal(size=(T, B, D)).astype(np.float32)
    next_obs = np.concatenate([obs[1:], rng.normal(size=(1, B, D)).astype(np.float32)])
    ended = terminated | truncated
    next_obs[ended] = rng.normal(size=(int(ended.sum()), D))  # final observations, not the next start
    start = np.concatenate([first[None], ended[:-1]])
    core = jax.tree.map(lambda x: jax.random.normal(jax.random.key(seed + 2), x.shape), model.initial_core(B))
    act = jax.jit(model.act)
    state, actions, extras = core, [], []
    for t in range(T):
        action, extra, state = act(params, obs[t], jax.random.key(100 + t), state, start[t])
        actions.append(action)
        extras.append(extra)
    traj = Trajectory(
        obs,
        np.stack(actions),
        rng.normal(size=(T, B)).astype(np.float32),
        terminated,
        truncated,
        next_obs,
        jax.tree.map(lambda *x: np.stack(x), *extras),
        start=start,
        core=jax.tree.map(lambda x: x[None], core),
    )
    return model, net, params, jax.device_get(traj)


def per_episode_oracle(net, params, traj):
    """`(logits [T, B, A], value [T, B], next_value [T, B])`, each episode of each column
    stepped alone (never a `start` flag): from the initial state, or for a column's first
    episode that began before the trajectory, from `traj.core`; `V(next_obs)` one step on
    from the state after step t, read by the episode that step belongs to."""
    step = jax.jit(lambda state, obs: net.step(params, state, obs, jnp.zeros(1, bool)))
    logits, value, next_value = np.zeros((T, B, A)), np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        state = jax.tree.map(lambda x: x[0, b : b + 1], traj.core)
        for t in range(T):
            if traj.start[t, b]:
                state = net.core.initial_state(1)
            state, (out, v) = step(state, traj.obs[t, b : b + 1])
            logits[t, b], value[t, b] = out[0], v[0]
            next_value[t, b] = step(state, traj.next_obs[t, b : b + 1])[1][1][0]
    return logits, value, next_value


@pytest.fixture(scope="module", params=["lstm", "gru"])
def recurrent(request):
    model, net, params, traj = recurrent_setup(request.param)
    assert traj.start[1:].any() and traj.truncated.any() and traj.terminated.any()
    return model, params, traj, per_episode_oracle(net, params, traj)


def test_acting_and_whole_batch_unroll_equal_each_episode_alone(recurrent):
    """The actor's values and log-probabilities, and `outputs`' logits, values and values of
    `next_obs` (final observations of ended episodes included)."""
    model, params, traj, (logits, value, next_value) = recurrent
    log_prob = np.asarray(categorical_log_prob(jnp.asarray(logits, jnp.float32), traj.action))
    np.testing.assert_allclose(traj.extras["value"], value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(traj.extras["log_prob"], log_prob, rtol=1e-5, atol=1e-5)
    got_logits, got_value, got_next = jax.jit(model.outputs)(params, traj)
    np.testing.assert_allclose(got_logits, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_value, value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_next, next_value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_minibatches", [1, 2, 4])
@pytest.mark.costly
def test_minibatch_path_replays_each_sequence_from_its_stored_state(recurrent, num_minibatches):
    """The learner's minibatch path (`prepare`, `minibatches`, `forward` / `train_forward`),
    fed the oracle's outputs beside the inputs: every minibatch's forward pass over its
    shuffled whole sequences gives, column by column, the oracle's logits and values, and the
    minibatches hold every column exactly once."""
    model, params, traj, (logits, value, _) = recurrent
    column = np.broadcast_to(np.arange(B), (T, B))
    batch = model.prepare((model.inputs(traj), logits.astype(np.float32), value.astype(np.float32), column))
    minibatches = model.minibatches(jax.random.key(7), batch, num_minibatches)
    forward, train_forward = jax.jit(model.forward), jax.jit(model.train_forward)
    seen = []
    for m in range(num_minibatches):
        inputs, want_logits, want_value, columns = jax.tree.map(lambda x: x[m], minibatches)
        got_logits, got_value = forward(params, inputs)
        np.testing.assert_allclose(got_logits, want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_value, want_value, rtol=1e-5, atol=1e-5)
        train_logits, train_value, aux = train_forward(params, inputs)
        np.testing.assert_allclose(train_logits, want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(train_value, want_value, rtol=1e-5, atol=1e-5)
        assert float(aux) == 0.0
        assert (np.asarray(columns) == np.asarray(columns)[0]).all()  # whole sequences
        seen.extend(np.asarray(columns)[0].tolist())
    assert sorted(seen) == list(range(B))


@pytest.mark.costly
def test_recurrent_ppo_advantages_are_rlax_gae_on_each_episode(recurrent):
    """The recurrent update's GAE (`outputs`, then `gae_from_values`) and the losses of its
    first SGD step (one epoch, one minibatch, unnormalised advantages, on-policy): `pg_loss =
    -mean(A)`, `value_loss = 0.5 mean(A^2)` with A rlax's GAE of each episode alone over the
    oracle's values."""
    model, params, traj, (_, value, next_value) = recurrent
    discount = GAMMA * (1.0 - traj.terminated)
    end = traj.terminated | traj.truncated
    expected = np.stack(
        [
            gae_episode_by_episode(traj.reward[:, b], discount[:, b], value[:, b], next_value[:, b], LAMBDA, end[:, b])
            for b in range(B)
        ],
        axis=1,
    )
    assert np.abs(expected).mean() > 0.1
    config = PPOConfig(
        num_epochs=1,
        num_minibatches=1,
        normalize_advantages=False,
        gamma=GAMMA,
        gae_lambda=LAMBDA,
        hidden_sizes=(HIDDEN,),
        core=model_kind(traj),
        core_size=CORE,
    )
    _, got_value, got_next = model.outputs(params, traj)
    _, advantage, target = gae_from_values(config, traj, got_value, got_next)
    np.testing.assert_allclose(advantage, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(target, expected + value, rtol=1e-4, atol=1e-5)

    metrics = first_step_metrics(config, params, traj)
    np.testing.assert_allclose(metrics["pg_loss"], -expected.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean(expected**2), rtol=1e-4, atol=1e-5)
    assert float(metrics["values_recomputed"]) == 1.0


@pytest.mark.parametrize("algorithm", ["ppo-vtrace", "impala"])
@pytest.mark.costly
def test_recurrent_vtrace_updates_are_rlax_vtrace_on_each_episode(recurrent, algorithm):
    """Off-policy (behaviour log-probabilities perturbed): the recurrent PPO-V-trace update's
    advantages and targets, and the first-step losses of PPO-V-trace and of IMPALA (whose
    loss unrolls each minibatch of sequences itself), are rlax's V-trace on each episode
    alone over the oracle's values and log-probabilities."""
    model, params, traj, (logits, value, next_value) = recurrent
    log_prob = np.asarray(categorical_log_prob(jnp.asarray(logits, jnp.float32), traj.action))
    behaviour = (log_prob + np.random.default_rng(5).normal(scale=0.5, size=log_prob.shape)).astype(np.float32)
    traj = traj._replace(extras={**traj.extras, "log_prob": behaviour})
    discount, end = GAMMA * (1.0 - traj.terminated), traj.terminated | traj.truncated
    rho = np.exp(log_prob - behaviour)
    errors, pg_advantage = (
        np.stack(x, axis=1)
        for x in zip(
            *[
                vtrace_episode_by_episode(
                    traj.reward[:, b],
                    discount[:, b],
                    value[:, b],
                    next_value[:, b],
                    rho[:, b],
                    LAMBDA,
                    end[:, b],
                    clip_rho=1.5,
                    clip_pg_rho=1.2,
                )
                for b in range(B)
            ],
            strict=True,
        )
    )
    assert np.abs(errors).mean() > 0.1
    kind = model_kind(traj)
    if algorithm == "impala":
        config = ImpalaConfig(
            num_epochs=1,
            num_minibatches=1,
            gamma=GAMMA,
            vtrace_lambda=LAMBDA,
            hidden_sizes=(HIDDEN,),
            clip_rho_threshold=1.5,
            clip_pg_rho_threshold=1.2,
            core=kind,
            core_size=CORE,
        )
        expected_pg = -np.mean(log_prob * pg_advantage)
    else:
        config = PPOConfig(
            advantage="vtrace",
            num_epochs=1,
            num_minibatches=1,
            normalize_advantages=False,
            gamma=GAMMA,
            vtrace_lambda=LAMBDA,
            hidden_sizes=(HIDDEN,),
            clip_rho_threshold=1.5,
            clip_pg_rho_threshold=1.2,
            core=kind,
            core_size=CORE,
        )
        got_traj, advantage, target = vtrace_advantages_and_targets(model, CATEGORICAL, config, params, traj)
        np.testing.assert_allclose(advantage, pg_advantage, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(target, errors + value, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got_traj.extras["log_prob"], log_prob, rtol=1e-5, atol=1e-5)
        expected_pg = -np.mean(pg_advantage)
    metrics = first_step_metrics(config, params, traj)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean(errors**2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["pg_loss"], expected_pg, rtol=1e-4, atol=1e-5)


def model_kind(traj) -> str:
    """The core kind a trajectory's carried state belongs to: an LSTM carries `(c, h)`."""
    return "lstm" if isinstance(traj.core, tuple) else "gru"


def first_step_metrics(config, params, traj):
    """The metrics of one update of the registered agent for `config`, whose parameters are
    `params` (the model's, the same layout), on `traj`: with one epoch of one minibatch,
    those of a single SGD step at `params`."""
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=10, axis_name=None)
    state = agent.init(jax.random.key(0))
    assert jax.tree.structure(state.params) == jax.tree.structure(params)
    state = state.replace(params=params)
    return jax.device_get(jax.jit(agent.update)(state, traj, jax.random.key(1))[1])


# --- observation normalisation and reward scaling: the trajectory the learner receives ----


def recording_agent() -> Agent:
    """An agent whose update hands back the trajectory it was given, as its metrics."""
    return Agent(
        init=lambda key: AgentState({}, (), jnp.zeros((), jnp.int32)),
        act=None,
        update=lambda state, traj, key: (state, traj),
    )


def discounted_returns_loop(reward, end, gamma):
    """`G_t = r_t + gamma G_{t-1}`, restarting at `t = 0` and after every end, per column."""
    returns = np.zeros_like(reward, np.float64)
    for b in range(reward.shape[1]):
        g = 0.0
        for t in range(reward.shape[0]):
            g = reward[t, b] + (0.0 if t == 0 or end[t - 1, b] else gamma * g)
            returns[t, b] = g
    return returns


def test_normalized_update_sees_obs_and_next_obs_normalised_and_rewards_scaled():
    """Two updates through `with_normalization`: on the second, the wrapped update receives
    `obs` and `next_obs` (final observations included) each normalised by the mean and
    variance of the first trajectory's raw `obs` (the statistics acting used, clipped at
    `obs_clip`), and rewards divided by the standard deviation of every discounted return so
    far (the first trajectory's and its own), clipped at `reward_clip`; the statistics end as
    NumPy's over everything merged."""
    agent = with_normalization(
        recording_agent(),
        ObsSpec((2,), jnp.float32),
        normalize_observations=True,
        obs_clip=2.5,
        scale_rewards=True,
        reward_clip=1.0,
        gamma=GAMMA,
        axis_name=None,
    )
    rng = np.random.default_rng(0)

    def trajectory():
        obs = (3.0 + rng.normal(size=(T, B, 2)) * [1.0, 4.0]).astype(np.float32)
        next_obs = (-2.0 + rng.normal(size=(T, B, 2)) * 5.0).astype(np.float32)  # far from obs: clips too
        end = rng.uniform(size=(T, B)) < 0.2
        return Trajectory(
            obs,
            np.zeros((T, B), np.int32),
            rng.normal(1.0, 2.0, (T, B)).astype(np.float32),
            end & (rng.uniform(size=(T, B)) < 0.5),
            end,
            next_obs,
            {},
        )

    first, second = trajectory(), trajectory()
    first = first._replace(truncated=first.truncated & ~first.terminated)
    second = second._replace(truncated=second.truncated & ~second.terminated)
    update = jax.jit(agent.update)
    state, _ = update(agent.init(jax.random.key(0)), first, jax.random.key(1))
    state, seen = update(state, second, jax.random.key(2))

    raw = first.obs.reshape(-1, 2)
    mean, std = raw.mean(0), np.sqrt(raw.var(0) + 1e-8)
    np.testing.assert_allclose(seen.obs, np.clip((second.obs - mean) / std, -2.5, 2.5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(seen.next_obs, np.clip((second.next_obs - mean) / std, -2.5, 2.5), rtol=1e-4, atol=1e-5)
    assert (np.abs(seen.next_obs) == 2.5).any() and (np.abs(seen.next_obs) < 2.5).any()

    returns = [discounted_returns_loop(t.reward, t.terminated | t.truncated, GAMMA) for t in (first, second)]
    return_std = np.sqrt(np.concatenate([r.ravel() for r in returns]).var() + 1e-8)
    np.testing.assert_allclose(seen.reward, np.clip(second.reward / return_std, -1.0, 1.0), rtol=1e-3, atol=1e-5)
    assert (np.abs(seen.reward) == 1.0).any() and (np.abs(seen.reward) < 1.0).any()
    everything = np.concatenate([raw, second.obs.reshape(-1, 2)])
    np.testing.assert_allclose(state.params.obs_stats.mean, everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(state.params.obs_stats.var, everything.var(0), rtol=1e-3)


# --- an observation wrapper: obs, next_obs and final observations through the rollout -----


def test_observed_env_selects_the_same_entries_of_obs_next_obs_and_final_observations():
    """`EnvConfig.observe` on CartPole with a 12-step time limit, through Anakin's rollout
    (what the learner receives), against the unwrapped environment under the same keys and
    actions: `obs` and `next_obs` are its entries (2, 0), at terminations and at time limits
    (where `next_obs` is the final observation, not the next episode's first) alike."""

    def act(params, obs, key):
        return jax.random.randint(key, obs.shape[:1], 0, 2), {}

    agent = Agent(init=None, act=act, update=None)

    def trajectory(observe):
        env = make_configured_jax_env(EnvConfig("CartPole-v1", params=("max_steps_in_episode=12",), observe=observe))
        params = env.default_params
        run = jax.jit(lambda key: rollout(env, params, agent, None, reset_envs(env, params, key, 16), key, 40)[1])
        return jax.device_get(run(jax.random.key(0)))

    full, observed = trajectory(()), trajectory((2, 0))
    assert full.truncated.any() and full.terminated.any()
    np.testing.assert_array_equal(observed.obs, full.obs[..., [2, 0]])
    np.testing.assert_array_equal(observed.next_obs, full.next_obs[..., [2, 0]])
    ended = full.truncated[:-1] | full.terminated[:-1]
    assert (full.next_obs[:-1][ended] != full.obs[1:][ended]).all()  # final observations, not resets
    for field in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(observed, field), getattr(full, field))
