"""How `make_muzero` assembles the agent from its parts, traced (nothing compiled): its `init`
state, `act`/`greedy_act` the search's, `update` the learner's with the run's length, the
prior-acting variant for benchmarks, and the contract suite's probe and exact configs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import MuZeroConfig, PPOConfig, algorithms, make_agent
from podracer.agents.muzero import agent as muzero_agent
from podracer.agents.muzero import learning, networks, search
from podracer.types import AgentState, BatchShape, DiscreteSpec, ObsSpec, Trajectory

OBS_SPEC, ACTION_SPEC = ObsSpec((3,), jnp.float32), DiscreteSpec(2)
CONFIG = MuZeroConfig(
    num_simulations=2,
    hidden_sizes=(4,),
    latent_size=4,
    dynamics_hidden_sizes=(4,),
    prediction_hidden_sizes=(4,),
    num_bins=5,
    value_max=3.0,
    unroll_steps=1,
    td_steps=1,
    buffer_size=64,
    batch_size=2,
    replay_ratio=None,
    learning_starts=0,
    anneal_lr=True,
    gamma=0.8,
)
KEY = jax.eval_shape(jax.random.key, 0)
OBS = jax.ShapeDtypeStruct((2, 3), jnp.float32)


def same_program(ours, theirs, *args):
    """`ours` and `theirs` trace to the same jaxpr with the same constants and outputs."""
    (a, a_out), (b, b_out) = (jax.make_jaxpr(f, return_shape=True)(*args) for f in (ours, theirs))
    assert str(a) == str(b)
    assert jax.tree.structure(a_out) == jax.tree.structure(b_out)  # the outputs' names too
    assert len(a.consts) == len(b.consts)
    for x, y in zip(a.consts, b.consts):
        np.testing.assert_array_equal(x, y)


def parts():
    network = networks.make_network(CONFIG, OBS_SPEC, 2)
    optimizer, replay = learning.make_optimizer(CONFIG), learning.make_replay(CONFIG)
    example = learning.example_step((3,), jnp.float32, 2)
    return network, optimizer, replay, example


def test_init_is_the_networks_parameters_a_fresh_learner_and_an_empty_buffer():
    network, optimizer, replay, example = parts()
    agent = muzero_agent.make_muzero(CONFIG, OBS_SPEC, ACTION_SPEC, num_updates=5)
    state = jax.eval_shape(agent.init, KEY)
    params = jax.eval_shape(lambda key: networks.init_params(network, key, OBS_SPEC), KEY)
    expected = AgentState(
        params, learning.initial_learner_state(optimizer, params), jnp.zeros((), jnp.int32), replay.init(example)
    )
    assert jax.tree.structure(state) == jax.tree.structure(jax.eval_shape(lambda: expected))
    for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(jax.eval_shape(lambda: expected))):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)

    def expected_init(key):
        params = networks.init_params(network, key, OBS_SPEC)
        return AgentState(
            params, learning.initial_learner_state(optimizer, params), jnp.zeros((), jnp.int32), replay.init(example)
        )

    same_program(agent.init, expected_init, jax.random.key(0))


@pytest.mark.parametrize("which", ["act", "greedy_act", "prior_act"])
def test_act_greedy_act_and_prior_act_are_the_searchs(which):
    network, *_ = parts()
    agent = muzero_agent.make_muzero(CONFIG, OBS_SPEC, ACTION_SPEC, num_updates=5)
    act, greedy_act, prior_act = search.make_acting(CONFIG, network)
    params = jax.eval_shape(lambda key: networks.init_params(network, key, OBS_SPEC), KEY)
    if which == "act":
        same_program(agent.act, act, params, OBS, KEY)
    elif which == "greedy_act":
        same_program(agent.greedy_act, greedy_act, params, OBS)
    else:
        same_program(muzero_agent.make_prior_act(CONFIG, OBS_SPEC, ACTION_SPEC), prior_act, params, OBS, KEY)


def test_update_is_the_learners_with_the_runs_number_of_updates():
    """The learner's update with this run's `num_updates` (the annealed learning rate's
    horizon: a different number traces to a different program)."""
    network, optimizer, replay, example = parts()
    agent = muzero_agent.make_muzero(CONFIG, OBS_SPEC, ACTION_SPEC, num_updates=5)
    state = jax.eval_shape(agent.init, KEY)
    T, B = 3, 2
    traj = Trajectory(
        obs=jax.ShapeDtypeStruct((T, B, 3), jnp.float32),
        action=jax.ShapeDtypeStruct((T, B), jnp.int32),
        reward=jax.ShapeDtypeStruct((T, B), jnp.float32),
        terminated=jax.ShapeDtypeStruct((T, B), bool),
        truncated=jax.ShapeDtypeStruct((T, B), bool),
        next_obs=jax.ShapeDtypeStruct((T, B, 3), jnp.float32),
        extras={
            "search_policy": jax.ShapeDtypeStruct((T, B, 2), jnp.float32),
            "root_value": jax.ShapeDtypeStruct((T, B), jnp.float32),
        },
    )
    update = learning.make_update(CONFIG, network, optimizer, replay, example, None, 5)
    same_program(agent.update, update, state, traj, KEY)


def test_without_search_swaps_act_for_the_prior_only_for_muzero():
    agent = make_agent(CONFIG, OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None)
    prior = muzero_agent.without_search(agent, CONFIG, OBS_SPEC, ACTION_SPEC)
    assert prior._replace(act=agent.act) == agent and prior.act is not agent.act
    network, *_ = parts()
    params = jax.eval_shape(lambda key: networks.init_params(network, key, OBS_SPEC), KEY)
    same_program(prior.act, search.make_acting(CONFIG, network)[2], params, OBS, KEY)
    assert muzero_agent.without_search(agent, PPOConfig(), OBS_SPEC, ACTION_SPEC) is None


def test_registered_with_its_probe_exact_config_and_step_metrics():
    algorithm = algorithms()["muzero"]
    assert algorithm.name == "muzero" and algorithm.action_spaces == (DiscreteSpec,)
    assert algorithm.masks is False and algorithm.probe_steps == 12_800
    assert algorithm.check_batch is MuZeroConfig.check_batch and algorithm.step_metrics == learning.STEP_METRICS
    probe = algorithm.probe_config()
    assert probe == MuZeroConfig(
        num_simulations=4,
        hidden_sizes=(32,),
        latent_size=32,
        dynamics_hidden_sizes=(32,),
        prediction_hidden_sizes=(32,),
        num_bins=21,
        value_max=5.0,
        unroll_steps=2,
        td_steps=2,
        learning_rate=3e-3,
        buffer_size=4_096,
        batch_size=64,
        replay_ratio=4.0,
        learning_starts=256,
        gamma=0.9,
    )


@pytest.mark.parametrize(
    "T, B, unroll, td, starts, buffer",
    [
        (8, 2, 3, 3, (8 - 7 + 1) * 2, 1024),  # long enough: the config's unroll and n kept
        (7, 2, 3, 3, (7 - 7 + 1) * 2, 1024),  # odd: unroll (T - 1) // 2 = 3
        (4, 2, 1, 2, (4 - 4 + 1) * 2, 1024),  # short: unroll (T - 1) // 2, n the rest of the rollout
        (3, 3, 1, 1, (3 - 3 + 1) * 3, 1024),  # shortest: one step of each
    ],
)
def test_exact_config_learns_once_on_every_sequence_of_the_batch(T, B, unroll, td, starts, buffer):
    config = MuZeroConfig(unroll_steps=3, td_steps=3, buffer_size=1024, batch_size=64, gradient_steps=3)
    exact = algorithms()["muzero"].exact_config(config, BatchShape(T, B))
    assert (exact.unroll_steps, exact.td_steps, exact.batch_size) == (unroll, td, starts)
    assert (exact.replay_ratio, exact.gradient_steps, exact.learning_starts, exact.buffer_size) == (None, 1, 0, buffer)


def test_exact_config_grows_a_buffer_too_small_for_the_sequences():
    """`(unroll + n + 1)` updates of the batch and each environment's next observation."""
    config = MuZeroConfig(unroll_steps=3, td_steps=3, buffer_size=100, batch_size=8)
    exact = algorithms()["muzero"].exact_config(config, BatchShape(8, 4))
    assert exact.buffer_size == 7 * 32 + 4 and exact.batch_size == (8 - 7 + 1) * 4
