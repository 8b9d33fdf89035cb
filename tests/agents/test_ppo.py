"""PPO's learning machinery on probe environments, through the Anakin runner."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from anakin import AnakinConfig, train
from podracer.agents import PPOConfig
from podracer.agents.acting import apply_time_major, make_sampling_act
from podracer.agents.minibatches import random_permutation, shuffled_minibatches
from podracer.agents.networks import make_actor_critic
from podracer.agents.ppo import normalize_per_minibatch
from podracer.agents.sgd import make_sgd_epochs
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import BatchShape, DiscreteSpec, ObsSpec

FAST = PPOConfig(learning_rate=3e-3, anneal_lr=False, num_minibatches=2, num_epochs=4, entropy_coef=0.0,
                 hidden_sizes=(16,), gamma=0.9)


def train_probe(env_id, agent=FAST, steps=20_000):
    config = Config(env=EnvConfig(env_id), agent=agent, total_env_steps=steps,
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=50))
    result = train(config)
    return result, jax.tree.map(lambda x: x[0], result.state.agent.params)


def values_and_probs(params, obs):
    net = make_actor_critic("mlp", FAST.hidden_sizes, FAST.activation, False, ObsSpec((1,), jnp.float32),
                            DiscreteSpec(2))
    logits, value = jax.jit(net.apply)(params, jnp.asarray(obs, jnp.float32))
    return np.asarray(value), np.asarray(jax.nn.softmax(logits))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_value_learns_constant_reward():
    _, params = train_probe("ProbeConstantReward", steps=10_000)
    value, _ = values_and_probs(params, [[0.0]])
    np.testing.assert_allclose(value, [1.0], atol=0.1)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_value_learns_discounting():
    _, params = train_probe("ProbeDiscounting", steps=20_000)
    value, _ = values_and_probs(params, [[0.0], [1.0]])
    np.testing.assert_allclose(value, [0.9, 1.0], atol=0.1)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_policy_learns_observation_dependent_action():
    result, params = train_probe("ProbeActionReward", steps=20_000)
    _, probs = values_and_probs(params, [[-1.0], [1.0]])
    assert probs[0, 0] > 0.9 and probs[1, 1] > 0.9
    assert result.metrics[-1]["episode_return"] > 0.8


def test_bad_hyperparameters_name_the_field():
    with pytest.raises(ConfigError, match="agent.learning_rate"):
        PPOConfig(learning_rate=-1.0)
    with pytest.raises(ConfigError, match="agent.gamma"):
        PPOConfig(gamma=1.5)
    with pytest.raises(ConfigError, match="agent.num_minibatches"):
        PPOConfig(num_minibatches=3).check_batch(BatchShape(16, 8))
    with pytest.raises(ConfigError, match="agent.torso"):
        dataclasses.replace(PPOConfig(), torso="transformer")


def reference_gae(value, next_value, reward, terminated, truncated, gamma, lambda_):
    """GAE by hand over one value function: `delta = r + gamma V(next_obs) - V(obs)`, no
    bootstrap after a termination, the trace cut where an episode ended: `[T, B]` each."""
    T, B = reward.shape
    advantage = np.zeros((T, B))
    for b in range(B):
        acc = 0.0
        for t in reversed(range(T)):
            discount = 0.0 if terminated[t, b] else gamma
            delta = reward[t, b] + discount * next_value[t, b] - value[t, b]
            acc = delta + (0.0 if terminated[t, b] or truncated[t, b] else discount * lambda_ * acc)
            advantage[t, b] = acc
    return advantage, advantage + value


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("lag, act_values", [(0, True), (1, True), (0, False), (1, False)])
def test_gae_uses_one_value_function_under_policy_lag(lag, act_values):
    """Actions and values from the actor's parameters, one version behind the learner's
    (lag 1) or the learner's own (lag 0), a termination, a truncation and an episode that
    runs past the rollout's end: the advantages and value targets are GAE over the learner's
    value function alone, V(obs) and V(next_obs) (the final observation where truncated).
    Without lag the actor's values are reused (no forward pass over the observations); an
    actor that computes no values (`act_values` False) leaves them all to the learner."""
    from podracer.agents.ppo import gae_advantages_and_targets
    from podracer.types import Trajectory

    T, B = 6, 3
    config = PPOConfig(gamma=0.9, gae_lambda=0.8)
    net = make_actor_critic("mlp", (8,), "tanh", False, ObsSpec((2,), jnp.float32), DiscreteSpec(2))
    learner = net.init(jax.random.key(0), jnp.zeros((1, 2)))
    actor = net.init(jax.random.key(1), jnp.zeros((1, 2))) if lag else learner
    rng = np.random.default_rng(0)
    states = rng.standard_normal((T + 1, B, 2)).astype(np.float32)
    obs, next_obs = states[:-1], states[1:].copy()
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    terminated[1, 0] = truncated[3, 1] = True  # env 1's time limit: next_obs[3] is its final observation
    next_obs[1, 0], next_obs[3, 1] = rng.standard_normal(2), rng.standard_normal(2)
    act = jax.jit(make_sampling_act(net, value=act_values))
    steps = [act(actor, obs[t], jax.random.key(t)) for t in range(T)]  # as an actor acts, [B] at a time
    traj = Trajectory(obs, np.stack([a for a, _ in steps]), rng.standard_normal((T, B)).astype(np.float32),
                      terminated, truncated, next_obs, jax.tree.map(lambda *xs: jnp.stack(xs), *[e for _, e in steps]))

    got_traj, advantage, target, recomputed = jax.jit(gae_advantages_and_targets, static_argnums=(0, 1))(
        net, config, learner, traj)

    _, value = apply_time_major(net, learner, jnp.asarray(obs))
    _, next_value = apply_time_major(net, learner, jnp.asarray(next_obs))
    expected = reference_gae(np.asarray(value), np.asarray(next_value), traj.reward, terminated, truncated, 0.9, 0.8)
    np.testing.assert_allclose(advantage, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target, expected[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_traj.extras["value"], value, rtol=1e-5, atol=1e-6)  # the loss clips around these
    assert ("value" in traj.extras) == act_values
    assert bool(recomputed) == bool(lag and act_values)


@pytest.mark.costly
def test_minibatches_are_uniformly_random_permutations():
    """`random_permutation` (what every epoch's minibatches are shuffled by): a
    permutation of `range(size)` at sizes with and without a remainder, another for another
    key, and uniform: over 4000 keys, where element 0 lands is uniform over the 8 positions
    (chi-square, 7 degrees of freedom, far below the 0.1% critical value of 24.3), and the
    minibatches of `shuffled_minibatches` hold the shuffled rows whole."""
    for size in (1, 7, 512, 3000):
        perm = np.asarray(random_permutation(jax.random.key(size), size))
        np.testing.assert_array_equal(np.sort(perm), np.arange(size))
    a, b = (np.asarray(random_permutation(jax.random.key(k), 512)) for k in (0, 1))
    assert (a != b).any()
    perms = np.asarray(jax.jit(jax.vmap(lambda k: random_permutation(k, 8)))(
        jax.random.split(jax.random.key(3), 4000)))
    counts = np.bincount(np.argmax(perms == 0, axis=1), minlength=8)
    assert ((counts - 500.0) ** 2 / 500.0).sum() < 24.3, counts
    # Two passes (512 rows): where element 0 lands is uniform over 8 bins of 64 positions.
    perms = np.asarray(jax.jit(jax.vmap(lambda k: random_permutation(k, 512)))(
        jax.random.split(jax.random.key(4), 4000)))
    counts = np.bincount(np.argmax(perms == 0, axis=1) // 64, minlength=8)
    assert ((counts - 500.0) ** 2 / 500.0).sum() < 24.3, counts
    batch = {"x": jnp.arange(12.0)[:, None] * jnp.ones((1, 3)), "y": jnp.arange(12)}
    minibatches = shuffled_minibatches(jax.random.key(5), batch, 3)
    assert minibatches["x"].shape == (3, 4, 3) and minibatches["y"].shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(minibatches["x"])[..., 0], np.asarray(minibatches["y"]))
    np.testing.assert_array_equal(np.sort(np.asarray(minibatches["y"]).ravel()), np.arange(12))


@pytest.mark.parametrize("shape", [(3, 40), (2, 5, 6)])
def test_advantages_are_standardised_per_minibatch(shape):
    """`normalize_per_minibatch` standardises each minibatch of an epoch's stack `[M, ...]`
    (flat transitions `[M, n]` or whole sequences `[M, T, b]`) with that minibatch's own
    mean and standard deviation, as a loss normalising its minibatch would: minibatches of
    very different scales come out alike, each with mean 0 and standard deviation 1."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape) * np.arange(1, shape[0] + 1).reshape((-1,) + (1,) * (len(shape) - 1)) ** 3
    x = (x + 10.0 * np.arange(shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))).astype(np.float32)
    got = np.asarray(jax.jit(lambda v: normalize_per_minibatch(v, None))(x))
    for m in range(shape[0]):
        np.testing.assert_allclose(got[m], (x[m] - x[m].mean()) / (x[m].std() + 1e-8), rtol=1e-4, atol=1e-5)
        assert abs(got[m].mean()) < 1e-5 and abs(got[m].std() - 1.0) < 1e-4


def test_ppo_losses_see_each_minibatch_standardised():
    """Through `make_sgd_epochs` with PPO's `prepare_epoch`: every gradient step's loss sees
    its minibatch's advantages with mean 0 and standard deviation 1 (not the whole batch's
    statistics, not unnormalised), on every epoch's reshuffled minibatches."""
    advantages = np.concatenate([np.full(6, 100.0), np.linspace(-1.0, 1.0, 6)]).astype(np.float32)

    def grad_fn(params, minibatch):
        advantage = minibatch[4]
        metrics = {"abs_mean": jnp.abs(jnp.mean(advantage)), "std_error": jnp.abs(jnp.std(advantage) - 1.0)}
        return (jnp.zeros(()), metrics), jax.tree.map(jnp.zeros_like, params)

    def prepare(minibatches):
        *rest, advantage, target = minibatches
        return (*rest, normalize_per_minibatch(advantage, None), target)

    run = make_sgd_epochs(grad_fn, optax.sgd(0.1), shuffled_minibatches, num_epochs=3,
                          num_minibatches=2, prepare_epoch=prepare)
    batch = tuple(np.zeros(12, np.float32) for _ in range(4)) + (advantages, np.zeros(12, np.float32))
    _, _, metrics = jax.jit(run)({"w": jnp.ones(2)}, optax.sgd(0.1).init({"w": jnp.ones(2)}), batch,
                                 jax.random.key(0))
    # Averages over the 6 steps of non-negative per-step errors: each step's is ~0.
    assert float(metrics["abs_mean"]) < 1e-5 and float(metrics["std_error"]) < 1e-3, metrics


# Each check of `PPOConfig`, its whole message: the field, the rule and the value given.
BAD_PPO_CONFIGS = [
    (dict(learning_rate=0.0), "agent.learning_rate must be > 0, got 0.0"),
    (dict(num_epochs=0), "agent.num_epochs must be >= 1, got 0"),
    (dict(num_minibatches=0), "agent.num_minibatches must be >= 1, got 0"),
    (dict(gamma=1.5), "agent.gamma must be in [0, 1], got 1.5"),
    (dict(gamma=-0.1), "agent.gamma must be in [0, 1], got -0.1"),
    (dict(gae_lambda=1.5), "agent.gae_lambda must be in [0, 1], got 1.5"),
    (dict(gae_lambda=-0.1), "agent.gae_lambda must be in [0, 1], got -0.1"),
    (dict(advantage="td"), "agent.advantage must be 'gae' or 'vtrace', got 'td'"),
    (dict(vtrace_lambda=1.5), "agent.vtrace_lambda must be in [0, 1], got 1.5"),
    (dict(vtrace_lambda=-0.1), "agent.vtrace_lambda must be in [0, 1], got -0.1"),
    (dict(clip_rho_threshold=0.0), "agent.clip_rho_threshold must be > 0, got 0.0"),
    (dict(clip_pg_rho_threshold=0.0), "agent.clip_pg_rho_threshold must be > 0, got 0.0"),
    (dict(clip_eps=0.0), "agent.clip_eps must be > 0, got 0.0"),
    (dict(entropy_coef=-0.1), "agent.entropy_coef must be >= 0, got -0.1"),
    (dict(value_coef=-0.1), "agent.value_coef must be >= 0, got -0.1"),
    (dict(max_grad_norm=0.0), "agent.max_grad_norm must be > 0, got 0.0"),
    (dict(adam_eps=0.0), "agent.adam_eps must be > 0, got 0.0"),
    (dict(torso="transformer"),
     "agent.torso must be one of ('mlp', 'nature_cnn', 'impala_cnn', 'minatar_cnn', 'multi_encoder'), "
     "got 'transformer'"),
    (dict(hidden_sizes=()), "agent.hidden_sizes must be positive sizes, got ()"),
    (dict(hidden_sizes=(4, 0)), "agent.hidden_sizes must be positive sizes, got (4, 0)"),
    (dict(activation="swish"), "agent.activation must be one of ('tanh', 'relu', 'gelu'), got 'swish'"),
    (dict(log_std_init=20.5), "agent.log_std_init must be in [-20, 20], got 20.5"),
    (dict(log_std_init=-20.5), "agent.log_std_init must be in [-20, 20], got -20.5"),
    (dict(log_std_init=float("nan")), "agent.log_std_init must be in [-20, 20], got nan"),
    (dict(advantage="vtrace", replay_fraction=1.0), "agent.replay_fraction must be in [0, 1), got 1.0"),
    (dict(advantage="vtrace", replay_fraction=-0.1), "agent.replay_fraction must be in [0, 1), got -0.1"),
    (dict(replay_fraction=0.5),
     "agent.replay_fraction needs agent.advantage vtrace (replayed data is off-policy), got 0.5"),
    (dict(replay_capacity=0), "agent.replay_capacity must be >= 1, got 0"),
    (dict(latent_size=4, shared_torso=True, reconstruction="sigmoid_ce", normalize_observations=True),
     "agent.reconstruction must be 'mse' with normalize_observations (normalised targets leave [0, 1]), "
     "got 'sigmoid_ce'"),
    (dict(core="transformer"), "agent.core must be one of"),
    (dict(obs_clip=0.0), "agent.obs_clip must be > 0, got 0.0"),
    (dict(reward_clip=0.0), "agent.reward_clip must be > 0, got 0.0"),
]


@pytest.mark.parametrize("fields, message", BAD_PPO_CONFIGS, ids=[m.split()[0] for _, m in BAD_PPO_CONFIGS])
def test_each_bad_hyperparameter_is_named_with_its_rule_and_value(fields, message):
    with pytest.raises(ConfigError) as error:
        PPOConfig(**fields)
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.parametrize("fields", [
    dict(gamma=0.0, gae_lambda=0.0, vtrace_lambda=0.0, entropy_coef=0.0, value_coef=0.0, log_std_init=-20.0),
    dict(gamma=1.0, gae_lambda=1.0, vtrace_lambda=1.0, log_std_init=20.0, num_epochs=1, num_minibatches=1,
         replay_capacity=1),
    dict(advantage="vtrace", replay_fraction=0.5),
    dict(latent_size=4, shared_torso=True, reconstruction="mse", normalize_observations=True),
    dict(latent_size=4, shared_torso=True, reconstruction="sigmoid_ce"),
])
def test_hyperparameters_on_the_edge_of_their_range_are_accepted(fields):
    config = PPOConfig(**fields)
    assert {name: getattr(config, name) for name in fields} == fields


def test_minibatches_must_divide_the_transitions_or_the_sequences():
    """Feed-forward: the `T * B` transitions (with replay, the replayed sequences' steps
    too) split into minibatches; with a recurrent core, the `B` whole sequences do."""
    with pytest.raises(ConfigError, match=r"^agent.num_minibatches must divide the per-device batch of 128 "
                                          r"transitions \(replayed ones included\), got 3$"):
        PPOConfig(num_minibatches=3).check_batch(BatchShape(16, 8))
    PPOConfig(num_minibatches=128).check_batch(BatchShape(16, 8))
    # half the sequences replayed: 8 fresh and 8 replayed, 256 transitions
    replay = PPOConfig(advantage="vtrace", replay_fraction=0.5, replay_capacity=1024)
    dataclasses.replace(replay, num_minibatches=256).check_batch(BatchShape(16, 8))
    with pytest.raises(ConfigError, match=r"^agent.num_minibatches must divide the per-device batch of 256 "):
        dataclasses.replace(replay, num_minibatches=3).check_batch(BatchShape(16, 8))
    recurrent = PPOConfig(core="lstm", num_minibatches=4)
    recurrent.check_batch(BatchShape(3, 8))  # 4 minibatches of 2 whole sequences
    with pytest.raises(ConfigError, match=r"^agent.num_minibatches must divide the 6 environments of each device "
                                          r"\(a recurrent core learns on whole sequences\), got 4$"):
        recurrent.check_batch(BatchShape(16, 6))


@pytest.mark.parametrize("actor", ["learner", "lagging", "no_values"])
def test_gae_values_reuse_the_actors_values_only_when_they_are_the_learners(actor):
    """`gae_values` with the actor's values in the trajectory: when their first step is the
    learner's `V(obs[0])` bit for bit, they are taken as they are (here the later steps are
    marked, so reuse shows) and `V(next_obs[t]) = V(obs[t + 1])`; otherwise (a lagging actor)
    every value is the learner's. The last step and a truncated step bootstrap from the
    learner's value of their own `next_obs`. An actor that logs no values leaves them all to
    the learner, with nothing recomputed."""
    from podracer.agents.ppo import gae_values
    from podracer.types import Trajectory

    T, B = 4, 2
    net = make_actor_critic("mlp", (4,), "tanh", False, ObsSpec((2,), jnp.float32), DiscreteSpec(2))
    learner = net.init(jax.random.key(0), jnp.zeros((1, 2)))
    rng = np.random.default_rng(0)
    states = rng.standard_normal((T + 1, B, 2)).astype(np.float32)
    obs, next_obs = states[:-1], states[1:].copy()
    truncated = np.zeros((T, B), bool)
    truncated[1, 1] = True
    next_obs[1, 1] = rng.standard_normal(2)  # env 1's final observation at its time limit
    value = np.asarray(apply_time_major(net, learner, jnp.asarray(obs))[1])
    next_value = np.asarray(apply_time_major(net, learner, jnp.asarray(next_obs))[1])
    behaviour = value.copy()
    if actor == "learner":
        behaviour[0] = net.apply(learner, jnp.asarray(obs[0]))[1]  # as the actor computed it, [B]
        behaviour[1:] += 100.0  # reused as they are: the first step matches
    else:
        behaviour += 0.5
    zeros = np.zeros((T, B), np.float32)
    extras = {} if actor == "no_values" else {"value": jnp.asarray(behaviour)}
    traj = Trajectory(obs, zeros.astype(np.int32), zeros, zeros.astype(bool), truncated, next_obs, extras)
    got_value, got_next, recomputed = jax.jit(gae_values, static_argnums=0)(net, learner, traj)
    expected_value = behaviour if actor == "learner" else value
    expected_next = np.concatenate([expected_value[1:], next_value[-1:]])
    expected_next[1, 1] = next_value[1, 1]
    np.testing.assert_allclose(got_value, expected_value, rtol=1e-6)
    np.testing.assert_allclose(got_next, expected_next, rtol=1e-5, atol=1e-6)
    assert recomputed.dtype == jnp.bool_ and bool(recomputed) == (actor == "lagging")


def test_a_gaussian_policy_starts_at_the_configured_log_std():
    from podracer.agents.ppo import make_ppo
    from podracer.types import BoxSpec

    agent = make_ppo(PPOConfig(log_std_init=-1.5, hidden_sizes=(4,)), ObsSpec((2,), jnp.float32),
                     BoxSpec((3,), -1.0, 1.0), num_updates=1)
    leaves = jax.tree_util.tree_flatten_with_path(agent.init(jax.random.key(0)).params)[0]
    log_std = [leaf for path, leaf in leaves if "log_std" in jax.tree_util.keystr(path)]
    assert len(log_std) == 1
    np.testing.assert_array_equal(log_std[0], np.full(3, -1.5, np.float32))


def test_the_registered_probe_config_is_the_one_these_probes_train():
    from podracer.agents.ppo import ALGORITHM

    assert ALGORITHM.probe_config() == FAST


@pytest.mark.costly
def test_a_latent_learns_with_the_configured_reconstruction_loss():
    """One epoch of one minibatch: the logged `reconstruction_loss` is the loss at the update's
    start, the model's sigmoid cross-entropy of 0/1 observations (not the squared error)."""
    from podracer.agents.actor_critic import make_actor_critic_model
    from podracer.agents.policies import policy_for
    from podracer.agents.ppo import make_ppo
    from podracer.types import Trajectory

    obs_spec, action_spec = ObsSpec((3,), jnp.float32), DiscreteSpec(2)
    config = PPOConfig(latent_size=4, shared_torso=True, reconstruction="sigmoid_ce", num_epochs=1,
                       num_minibatches=1, hidden_sizes=(4,))
    agent = make_ppo(config, obs_spec, action_spec, num_updates=1)
    state = agent.init(jax.random.key(0))
    obs = (np.random.default_rng(0).uniform(size=(3, 2, 3)) < 0.5).astype(np.float32)
    zeros = np.zeros((2, 2), np.float32)
    traj = Trajectory(obs[:2], zeros.astype(np.int32), zeros, zeros.astype(bool), zeros.astype(bool), obs[1:],
                      {"log_prob": zeros, "value": zeros})
    _, metrics = jax.jit(agent.update)(state, traj, jax.random.key(1))
    model = make_actor_critic_model("mlp", (4,), "tanh", True, obs_spec, action_spec, policy_for(action_spec),
                                    latent_size=4, reconstruction="sigmoid_ce")
    expected = model.train_forward(state.params, jnp.asarray(obs[:2].reshape(4, 3)))[2]
    np.testing.assert_allclose(metrics["reconstruction_loss"], expected, rtol=1e-5)
