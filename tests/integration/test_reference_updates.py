"""The library's update steps against the independent references of
`tests.support.reference_updates`, on every learner path the parity tests compare: one
device (`agent.update`), Sebulba's learner step on 4 devices (`make_update_step`, each device
with its own key) and Anakin's program on 2 devices (rollout then update, compiled together),
and IMPALA's update with replayed sequences on the batch the replay wrapper assembles.

The replay agents, DQN and SAC, are in `test_reference_replay_agents.py`.

The parity tests (1 against 4 devices, Anakin against Sebulba, replay mixing) compare two
runs of the same code, so a bug in the update that both share passes them; here the other
side is written independently. Every config sets each loss term and option to a value that
matters (entropy bonus, value clipping, advantage standardisation, gradient clipping that
clips, annealing, two epochs of two minibatches), so dropping any one moves the parameters
further than the tolerance (each reference's own error is ~1e-6 of the largest step, the
tolerance 1e-4 of it).

Without `-m slow`: PPO on one device and on Sebulba's 4, IMPALA on one device and with
replay; the slow runs add IMPALA on Sebulba's 4 and Anakin's program for both.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from podracer.agents import ImpalaConfig, PPOConfig, make_agent
from podracer.replay.mixing import with_replay
from podracer.types import Agent
from sebulba.learner import AXIS
from tests.support import reference_updates as reference
from tests.support.update_paths import (
    ACTION_SPEC,
    NUM_UPDATES,
    OBS_SPEC,
    B,
    T,
    anakin_update,
    assert_same_update,
    permutations,
    sebulba_update,
    trajectory,
)

pytestmark = pytest.mark.timeout(240)


PPO = PPOConfig(
    learning_rate=1e-2,
    anneal_lr=True,
    num_epochs=2,
    num_minibatches=2,
    gamma=0.9,
    gae_lambda=0.8,
    clip_eps=0.1,
    entropy_coef=0.05,
    value_coef=0.5,
    max_grad_norm=0.3,
    hidden_sizes=(8,),
)
IMPALA = ImpalaConfig(
    learning_rate=1e-2,
    anneal_lr=True,
    num_epochs=2,
    num_minibatches=2,
    gamma=0.9,
    vtrace_lambda=0.8,
    clip_rho_threshold=1.2,
    clip_pg_rho_threshold=0.9,
    entropy_coef=0.05,
    max_grad_norm=0.3,
    hidden_sizes=(8,),
)


def expected_update(config, params, traj, keys, num_updates: int):
    """The reference update of `params` on the global `[T, B]` trajectory whose learner
    devices (one per key, each holding `B / D` environments) drew their minibatches from `keys`."""
    T, B = np.shape(traj.reward)
    D = len(keys)
    if isinstance(config, PPOConfig):
        indices = reference.ppo_minibatch_indices(
            permutations(keys, config.num_epochs, T * B // D), T, B, config.num_minibatches
        )
        return reference.ppo_update(config, params, traj, indices, num_updates)
    indices = reference.sequence_minibatch_indices(
        permutations(keys, config.num_epochs, B // D), B, config.num_minibatches
    )
    return reference.impala_update(config, params, traj, indices, num_updates)


@pytest.mark.parametrize(
    "config, path",
    [
        pytest.param(PPO, "one_device", id="ppo-one_device"),
        pytest.param(PPO, "sebulba_4_devices", id="ppo-sebulba_4_devices"),
        pytest.param(IMPALA, "one_device", id="impala-one_device"),
        pytest.param(IMPALA, "sebulba_4_devices", id="impala-sebulba_4_devices", marks=pytest.mark.slow),
    ],
)
@pytest.mark.costly
def test_actor_critic_update_equals_the_reference(config, path):
    """Two epochs of two minibatches from behaviour parameters off the learner's, on a
    trajectory with terminations and time limits (the last step too)."""
    one = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=None)
    state = jax.jit(one.init)(jax.random.key(0))
    behaviour = jax.jit(one.init)(jax.random.key(1)).params
    traj = trajectory(one.act, behaviour, jax.random.key(2))
    key = jax.random.key(3)
    if path == "one_device":
        got, metrics = jax.jit(one.update)(state, traj, key)
        keys = [key]
    else:
        four = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=AXIS)
        got, metrics, keys = sebulba_update(four, state, traj, key)
    expected, loss = expected_update(config, state.params, jax.device_get(traj), keys, NUM_UPDATES)
    assert_same_update(got.params, expected, state.params)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)
    assert float(metrics["grad_norm"]) > config.max_grad_norm, "gradient clipping is not exercised"


@pytest.mark.slow
@pytest.mark.parametrize("config", [PPO, IMPALA], ids=["ppo", "impala"])
def test_anakin_update_equals_the_reference(config):
    """Anakin's rollout and update compiled together, on Catch (episodes of several steps)."""
    before, traj, keys, after, _, num_updates = anakin_update(config, "Catch")
    expected, _ = expected_update(config, before.params, traj, keys, num_updates)
    assert_same_update(after.params, expected, before.params)


@pytest.mark.costly
def test_impala_update_with_replay_equals_the_reference():
    """IMPALA learning from its rollout plus as many sequences replayed from its buffer, which
    holds an earlier rollout (replayed sequences may cross from it into this one, where the
    streams do not continue: a truncation): the reference update on the `[T, B + M]` batch that
    the replay wrapper hands the learner, recorded by a stand-in agent behind the same wrapper,
    buffer and key."""
    config = dataclasses.replace(IMPALA, replay_fraction=0.5, replay_capacity=4 * T * B)
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    behaviour = jax.jit(agent.init)(jax.random.key(1)).params
    earlier = trajectory(agent.act, behaviour, jax.random.key(4))
    state = state.replace(local=update(state, earlier, jax.random.key(5))[0].local)
    traj, key = trajectory(agent.act, behaviour, jax.random.key(2)), jax.random.key(3)
    got, metrics = update(state, traj, key)

    def record(state, batch, key):
        return state, {"batch": batch, "key": key}

    recorder = with_replay(
        Agent(init=agent.init, act=agent.act, update=record, greedy_act=None),
        config.replay_fraction,
        config.replay_capacity,
        OBS_SPEC,
        None,
    )
    seen = jax.device_get(jax.jit(recorder.update)(state, traj, key)[1])
    batch = seen["batch"]
    # The batch checked against the two rollouts, not taken on trust from the wrapper: the
    # fresh rollout, then windows of T consecutive steps of one environment's stream.
    fresh = jax.device_get(traj)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[:, :B], batch), fresh)
    stream = jax.tree.map(lambda a, b: np.concatenate([a, b]), jax.device_get(earlier), fresh)
    # The streams do not continue into the fresh rollout: a step that did not terminate is cut.
    stream.truncated[T - 1] |= ~stream.terminated[T - 1]
    starts = set()
    for j in range(B, 2 * B):
        column = jax.tree.map(lambda x, j=j: x[:, j], batch)
        [(start, env)] = [
            (s, e) for s in range(T + 1) for e in range(B) if np.array_equal(stream.obs[s : s + T, e], column.obs)
        ]
        jax.tree.map(np.testing.assert_array_equal, column, jax.tree.map(lambda x: x[start : start + T, env], stream))
        starts.add(start)
    indices = reference.sequence_minibatch_indices(
        permutations([seen["key"]], config.num_epochs, 2 * B), 2 * B, config.num_minibatches
    )
    expected, loss = reference.impala_update(config, state.params, batch, indices, NUM_UPDATES)
    assert_same_update(got.params, expected, state.params)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)
    assert len(starts - {0, T}) > 0, f"no replayed sequence crosses between the rollouts: {starts}"
