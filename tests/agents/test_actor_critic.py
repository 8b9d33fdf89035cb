"""The actor-critic model a config asks for: the checks on its core and latent settings
(each message whole), which network and learning pipeline each setting builds, and a
recurrent model's learner outputs against stepping its core one step at a time."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import networks
from podracer.agents.actor_critic import (
    CORE_KINDS,
    check_model_fields,
    make_actor_critic_model,
    make_latent_actor_critic,
)
from podracer.agents.minibatches import flatten_time_batch, sequence_minibatches, shuffled_minibatches
from podracer.agents.policies import Categorical, policy_for
from podracer.config import ConfigError
from podracer.networks.latent import LatentActorCritic
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec, Trajectory

OBS = ObsSpec((3,), jnp.float32)
GOOD = dict(
    core="none",
    core_size=1,
    latent_size=0,
    reconstruction_coef=0.0,
    reconstruction="mse",
    shared_torso=False,
    replay_fraction=0.0,
)
BAD = [
    (dict(core="transformer"), "agent.core must be one of ('none', 'lstm', 'gru'), got 'transformer'"),
    (dict(core_size=0), "agent.core_size must be >= 1, got 0"),
    (dict(latent_size=-1), "agent.latent_size must be >= 0 (0: no latent), got -1"),
    (dict(reconstruction_coef=-0.5), "agent.reconstruction_coef must be >= 0, got -0.5"),
    (dict(reconstruction_coef=float("nan")), "agent.reconstruction_coef must be >= 0, got nan"),
    (dict(reconstruction="l1"), "agent.reconstruction must be one of ('mse', 'sigmoid_ce'), got 'l1'"),
    (
        dict(latent_size=4, shared_torso=True, core="lstm"),
        "agent.latent_size must be 0 with a recurrent core (the latent is for feed-forward agents), got 4",
    ),
    (
        dict(latent_size=4),
        "agent.shared_torso must be true with a latent (the policy and value heads read one latent), got False",
    ),
    (
        dict(core="gru", replay_fraction=0.25),
        "agent.replay_fraction must be 0 with a recurrent core (replayed sequences do not keep core states), got 0.25",
    ),
]


@pytest.mark.parametrize("fields, message", BAD, ids=[m.split()[0] for _, m in BAD])
def test_each_bad_model_setting_is_named_with_its_rule_and_value(fields, message):
    with pytest.raises(ConfigError) as error:
        check_model_fields(SimpleNamespace(**(GOOD | fields)))
    assert str(error.value) == message


@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(core="lstm", core_size=1),
        dict(core="gru", replay_fraction=0.0),
        dict(latent_size=1, shared_torso=True, reconstruction="sigmoid_ce"),
        dict(replay_fraction=0.5),
    ],
)
def test_model_settings_on_the_edge_of_their_range_are_accepted(fields):
    check_model_fields(SimpleNamespace(**(GOOD | fields)))
    assert CORE_KINDS == ("none", "lstm", "gru")


def test_a_feed_forward_model_acts_with_values_only_from_a_shared_torso():
    """Feed-forward: `make_actor_critic`'s network, flat transitions shuffled into
    minibatches; acting computes `V(obs)` only where the critic shares the policy's torso."""
    for shared in (True, False):
        model = make_actor_critic_model("mlp", (4,), "tanh", shared, OBS, DiscreteSpec(2), Categorical())
        assert isinstance(model.network, networks.ActorCritic) and model.initial_core is None
        assert (model.network.critic_torso is None) == shared
        assert model.prepare is flatten_time_batch and model.minibatches is shuffled_minibatches
        params = jax.eval_shape(model.init, jax.random.key(0))
        _, extras = jax.eval_shape(model.act, params, jnp.zeros((5, 3)), jax.random.key(1))
        assert ("value" in extras) == shared
    box = BoxSpec((2,), -1.0, 1.0)
    model = make_actor_critic_model("mlp", (4,), "tanh", True, OBS, box, policy_for(box))
    params = jax.eval_shape(model.init, jax.random.key(0))
    greedy = jax.eval_shape(model.greedy_act, params, jnp.zeros((5, 3)))
    assert greedy.shape == (5, 2) and greedy.dtype == jnp.float32  # the Gaussian's mean, not an argmax


def test_a_recurrent_model_has_its_core_heads_and_sequence_pipeline():
    box = BoxSpec((2,), -1.0, 1.0)
    model = make_actor_critic_model(
        "mlp", (6, 4), "relu", False, OBS, box, policy_for(box), core="gru", core_size=5, log_std_init=-0.5
    )
    assert model.network is None and model.minibatches is sequence_minibatches
    tree = {"x": np.zeros((2, 3))}
    assert model.prepare(tree) is tree
    core = model.initial_core(7)
    assert jax.tree.leaves(core)[0].shape == (7, 5)
    params = jax.eval_shape(model.init, jax.random.key(0))
    assert set(params) == {"torso", "core", "heads"}
    heads = params["heads"]["params"]
    assert heads["torso"]["Dense_0"]["kernel"].shape == (5, 4)  # one hidden layer of hidden_sizes[-1]
    assert "critic_torso" in heads  # not shared
    assert heads["log_std"].shape == (2,)
    T, b = 4, 3  # a minibatch of b whole sequences, traced only
    cores = jax.tree.map(lambda x: jnp.zeros((T,) + x.shape, x.dtype), model.initial_core(b))
    inputs = (jnp.zeros((T, b, 3)), jnp.zeros((T, b), bool), cores)
    (mean, log_std), value, aux = jax.eval_shape(model.train_forward, params, inputs)
    assert mean.shape == log_std.shape == (T, b, 2) and value.shape == (T, b) and aux.shape == ()


def test_settings_a_model_cannot_take_are_refused_by_name():
    with pytest.raises(ValueError) as error:
        make_actor_critic_model("mlp", (4,), "tanh", True, OBS, DiscreteSpec(2), Categorical(), core="rnn")
    assert str(error.value) == f"unknown core 'rnn'; choose one of {CORE_KINDS}"
    with pytest.raises(ValueError) as error:
        make_actor_critic_model(
            "mlp", (4,), "tanh", True, OBS, DiscreteSpec(2), Categorical(), core="lstm", latent_size=2
        )
    assert str(error.value) == "a latent (latent_size > 0) is for feed-forward models only"
    fields = {"a": ObsSpec((2,), jnp.float32)}
    with pytest.raises(ConfigError) as error:
        make_latent_actor_critic("mlp", (4,), "tanh", fields, DiscreteSpec(2), 3)
    assert str(error.value) == (
        "agent.latent_size: the latent's decoder reconstructs array observations, and these "
        "are structured (dict/NamedTuple); set it to 0"
    )


def test_a_latent_model_decodes_to_the_observations_shape_from_its_latent():
    box = BoxSpec((2,), -1.0, 1.0)
    network = make_latent_actor_critic("mlp", (6, 5), "relu", ObsSpec((3, 2), jnp.float32), box, 4, -0.5)
    assert isinstance(network, LatentActorCritic) and network.encoder.latent_size == 4
    assert isinstance(network.heads, networks.GaussianActorCritic) and network.heads.log_std_init == -0.5
    assert network.heads.torso.hidden_sizes == () and network.heads.critic_torso is None
    assert (network.decoder.obs_shape, network.decoder.hidden_size) == ((3, 2), 5)
    model = make_actor_critic_model("mlp", (6, 5), "relu", True, OBS, DiscreteSpec(3), Categorical(), latent_size=4)
    assert isinstance(model.network, LatentActorCritic)
    assert isinstance(model.network.heads, networks.ActorCritic) and model.network.heads.num_actions == 3


@pytest.mark.slow
def test_recurrent_outputs_step_the_core_through_each_episode():
    """`outputs` over `[T, B]` against `act`'s core stepped one step at a time with the
    recorded `start` flags: the same values, and `V(next_obs[t])` read from the state after
    step t without a reset. Slow: about 4 s to compile on a loaded 2-core machine."""
    T, B = 3, 2
    model = make_actor_critic_model(
        "mlp", (4,), "tanh", True, OBS, DiscreteSpec(2), Categorical(), core="lstm", core_size=3
    )
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(T, B, 3)).astype(np.float32)
    next_obs = rng.normal(size=(T, B, 3)).astype(np.float32)
    start = np.array([[True, True], [False, True], [True, False]])
    core0 = model.initial_core(B)
    traj = Trajectory(
        obs,
        np.zeros((T, B), np.int32),
        np.zeros((T, B), np.float32),
        np.zeros((T, B), bool),
        np.zeros((T, B), bool),
        next_obs,
        {},
        start=start,
        core=jax.tree.map(lambda x: jnp.broadcast_to(x, (T,) + x.shape), core0),
    )

    @jax.jit
    def both(params):
        out, value, next_value = model.outputs(params, traj)
        core, values, next_values = core0, [], []
        for t in range(T):
            _, extras, core = model.act(params, obs[t], jax.random.key(t), core, start[t])
            values.append(extras["value"])
            _, next_extras, _ = model.act(params, next_obs[t], jax.random.key(t), core, np.zeros(B, bool))
            next_values.append(next_extras["value"])
        return (value, next_value), (jnp.stack(values), jnp.stack(next_values))

    shapes = jax.eval_shape(model.init, jax.random.key(0))  # random values: no initialiser compiled
    leaves, tree = jax.tree.flatten(shapes)
    params = jax.tree.unflatten(tree, [rng.normal(size=x.shape).astype(np.float32) for x in leaves])
    (value, next_value), (stepped, stepped_next) = both(params)
    np.testing.assert_allclose(value, stepped, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(next_value, stepped_next, rtol=1e-5, atol=1e-6)
