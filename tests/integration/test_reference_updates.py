"""The library's update steps against the independent references of
`tests.support.reference_updates`, on every learner path the parity tests compare: one
device (`agent.update`), Sebulba's learner step on 4 devices (`make_update_step`, each device
with its own key) and Anakin's program on 2 devices (rollout then update, compiled together),
and IMPALA's update with replayed sequences on the batch the replay wrapper assembles.

The parity tests (1 against 4 devices, Anakin against Sebulba, replay mixing) compare two
runs of the same code, so a bug in the update that both share passes them; here the other
side is written independently. Every config sets each loss term and option to a value that
matters (entropy bonus, value clipping, advantage standardisation, gradient clipping that
clips, annealing, two epochs of two minibatches), so dropping any one moves the parameters
further than the tolerance (each reference's own error is ~1e-6 of the largest step, the
tolerance 1e-4 of it).

Without `-m slow` (about 20 s of CPU): PPO on one device and on Sebulba's 4, IMPALA on one
device and with replay, DQN's gradient step on 1 and 4 devices and its whole update on one,
SAC on one. The slow runs add IMPALA, DQN and SAC on Sebulba's 4 devices and Anakin's program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from anakin import AnakinConfig
from anakin import runner as anakin_runner
from anakin.program import iteration_keys, make_train_call
from anakin.rollout import rollout
from podracer import parallel
from podracer.agents import DQNConfig, ImpalaConfig, PPOConfig, algorithms, make_agent
from podracer.agents.common import random_permutation  # the library's draw: the references reuse its indices
from podracer.agents.dqn import DQNLearnerState, make_learn_on_batch, make_optimizer, make_q_network
from podracer.agents.replay_mixing import with_replay
from podracer.config import Config, EnvConfig
from podracer.counters import Count
from podracer.replay import ReplaySample, Transition
from podracer.types import Agent, BatchShape, BoxSpec, DiscreteSpec, ObsSpec, Trajectory
from sebulba.learner import AXIS, device_keys, make_update_step, trajectory_sharding
from tests.support import reference_updates as reference
from tests.support.contract_helpers import place_learner_state, replicated

pytestmark = pytest.mark.timeout(240)

T, B, OBS, A = 8, 8, 3, 3
OBS_SPEC, ACTION_SPEC = ObsSpec((OBS,), jnp.float32), DiscreteSpec(A)
NUM_UPDATES = 5

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
DQN = DQNConfig(
    learning_rate=1e-2,
    max_grad_norm=0.3,
    gamma=0.9,
    loss="huber",
    huber_delta=0.5,
    target_update_period=1,
    target_update_tau=0.3,
    hidden_sizes=(8,),
)


def assert_same_update(got, expected, before, rtol: float = 1e-4) -> None:
    """`got` and `expected` moved `before` by the same steps, leaf by leaf, within `rtol` of
    the largest step (the parameters' values would hide a wrong step under their own size)."""
    got, expected, before = jax.device_get((got, expected, before))
    steps = jax.tree.map(lambda e, b: np.asarray(e, np.float64) - b, expected, before)
    largest = max(float(np.abs(s).max()) for s in jax.tree.leaves(steps))
    assert largest > 1e-4, "the update did not move the parameters"
    jax.tree.map(
        lambda g, s, b: np.testing.assert_allclose(np.asarray(g, np.float64) - b, s, rtol=0, atol=rtol * largest),
        got,
        steps,
        before,
    )


def trajectory(act, params, key, T: int = T, B: int = B) -> Trajectory:
    """`[T, B]` steps whose `next_obs[t]` is `obs[t + 1]` where the episode went on and a final
    observation of its own where it ended (both kinds of end, at the last step too), actions
    and log-probabilities from `act` with `params` (behaviour parameters off the learner's,
    so that the ratios are not 1 and the surrogate clips)."""
    keys = jax.random.split(key, 6)
    observations = jax.random.normal(keys[0], (T + 1, B, OBS))
    final = jax.random.normal(keys[1], (T, B, OBS))
    terminated = jax.random.bernoulli(keys[2], 0.15, (T, B)).at[T - 1, 0].set(True)
    truncated = (jax.random.bernoulli(keys[3], 0.15, (T, B)) & ~terminated).at[T - 1, 1].set(True)
    ended = (terminated | truncated)[..., None]
    obs = observations[:T]
    action, extras = jax.vmap(act, in_axes=(None, 0, 0))(params, obs, jax.random.split(keys[4], T))
    reward = jax.random.normal(keys[5], (T, B))
    return Trajectory(obs, action, reward, terminated, truncated, jnp.where(ended, final, observations[1:]), extras)


def permutations(keys, num_epochs: int, size: int) -> np.ndarray:
    """`[D, E, size]`: the permutation device d's update draws in epoch e from its key."""
    return np.stack(
        [np.stack([np.asarray(random_permutation(k, size)) for k in jax.random.split(key, num_epochs)]) for key in keys]
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


def sebulba_update(agent, state, traj, key, num_devices: int = 4):
    """Sebulba's learner step on `num_devices` devices: `(state, metrics, keys [D])`."""
    mesh = parallel.make_mesh(jax.devices()[:num_devices], AXIS)
    keys = device_keys(key, mesh)
    got, metrics = make_update_step(agent, mesh)(
        place_learner_state(state, mesh), (jax.device_put(traj, trajectory_sharding(mesh)),), keys
    )
    return replicated(got), metrics, list(jax.device_get(keys))


@pytest.mark.parametrize(
    "config, path",
    [
        pytest.param(PPO, "one_device", id="ppo-one_device"),
        pytest.param(PPO, "sebulba_4_devices", id="ppo-sebulba_4_devices"),
        pytest.param(IMPALA, "one_device", id="impala-one_device"),
        pytest.param(IMPALA, "sebulba_4_devices", id="impala-sebulba_4_devices", marks=pytest.mark.slow),
    ],
)
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


def dqn_sample(key, N: int = 16) -> ReplaySample:
    keys = jax.random.split(key, 6)
    obs, next_obs = jax.random.normal(keys[0], (N, OBS)), jax.random.normal(keys[1], (N, OBS))
    action = jax.random.randint(keys[2], (N,), 0, A)
    reward = jax.random.normal(keys[3], (N,)) * 2.0  # TD errors beyond huber_delta, and within
    discount = DQN.gamma * jax.random.bernoulli(keys[4], 0.8, (N,)).astype(jnp.float32)
    weights = jax.random.uniform(keys[5], (N,), minval=0.2, maxval=1.0)
    return ReplaySample(Transition(obs, action, reward, discount, next_obs), jnp.arange(N), weights)


@pytest.mark.parametrize("num_devices, double_q", [(1, True), (4, True), (1, False)])
def test_dqn_gradient_step_equals_the_reference(num_devices, double_q):
    """One gradient step on a given weighted sample, with a target network of its own (so
    Double DQN's selection matters), then a Polyak target update."""
    config = dataclasses.replace(DQN, double_q=double_q)
    network, optimizer = make_q_network(config, OBS_SPEC, ACTION_SPEC), make_optimizer(config)
    online = network.init(jax.random.key(0), jnp.zeros((1, OBS)))
    target = network.init(jax.random.key(1), jnp.zeros((1, OBS)))
    opt_state = warm(reference.dqn_optimizer(config), online, jax.random.key(4))
    learner = DQNLearnerState(opt_state, target, Count.zeros(), jnp.zeros(()), Count.zeros())
    sample = dqn_sample(jax.random.key(2))
    if num_devices == 1:
        step = jax.jit(make_learn_on_batch(config, network, optimizer, None))
    else:
        mesh = parallel.make_mesh(jax.devices()[:num_devices], AXIS)
        learn = make_learn_on_batch(config, network, optimizer, AXIS)
        step = jax.jit(
            jax.shard_map(
                lambda o, lr, s: learn(o, lr, s)[:2], mesh=mesh, in_specs=(P(), P(), P(AXIS)), out_specs=(P(), P())
            )
        )
    got_online, got_learner = step(online, learner, sample)[:2]
    expected_online, expected_target, _ = reference.dqn_step(
        config, online, target, opt_state, 0, sample.items, sample.weights
    )
    assert_same_update(got_online, expected_online, online)
    assert_same_update(got_learner.target, expected_target, target)


@pytest.mark.parametrize("path", ["one_device", pytest.param("sebulba_4_devices", marks=pytest.mark.slow)])
def test_dqn_update_equals_the_reference(path):
    """The whole update with the contract's exact config: the trajectory into the buffer,
    its 1-step transitions (no bootstrap past a termination, a time limit's from its final
    observation) sampled each the same number of times, one gradient step."""
    algorithm = algorithms()["dqn"]
    config = algorithm.exact_config(DQN, BatchShape(T, B))
    one = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=None)
    state = jax.jit(one.init)(jax.random.key(0))
    opt_state = warm(reference.dqn_optimizer(config), state.params.online, jax.random.key(4))
    state = state.replace(opt_state=state.opt_state._replace(optimizer=opt_state))
    traj = trajectory(one.act, state.params, jax.random.key(2))
    if path == "one_device":
        got, metrics = jax.jit(one.update)(state, traj, jax.random.key(3))
    else:
        four = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=AXIS)
        got, metrics, _ = sebulba_update(four, state, traj, jax.random.key(3))
    expected, loss = dqn_update_reference(config, state, jax.device_get(traj))
    assert_same_update(got.params.online, expected, state.params.online)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)


def dqn_update_reference(config: DQNConfig, state, traj: Trajectory):
    """The reference's one step on all of `traj`'s transitions, each weighted 1."""
    batch = transitions(config.gamma, traj)
    online, _, loss = reference.dqn_step(
        config,
        state.params.online,
        state.opt_state.target,
        state.opt_state.optimizer,
        0,
        batch,
        np.ones(batch[2].shape, np.float32),
    )
    return online, loss


def transitions(gamma: float, traj: Trajectory) -> tuple:
    """`(obs, action, reward, discount, next_obs)` `[T * B, ...]`: a trajectory's 1-step
    transitions, time-major; no bootstrap past a termination, a time limit's from its final
    observation."""
    discount = gamma * (1.0 - reference.flat(traj.terminated).astype(np.float32))
    return (
        reference.flat(traj.obs),
        reference.flat(traj.action),
        reference.flat(traj.reward),
        discount,
        reference.flat(traj.next_obs),
    )


def warm(optimizer, params, key):
    """`optimizer`'s state after one step on random gradients. From a fresh state, Adam's
    first step is about `lr sign(g)`, blind to a term that only rescales a gradient; with
    moments to mix with, the step depends on the gradient's size too."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    grads = treedef.unflatten([0.01 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
    return optimizer.update(grads, optimizer.init(params), params)[1]


def anakin_update(agent_config, env_id: str, num_devices: int = 2, envs_per_device: int = 2):
    """Anakin's program, one update on `num_devices` devices: `(state before, the global
    trajectory it learned from, each device's update key, state after, metrics, num_updates)`,
    the trajectory rebuilt from the same keys and environments as the program's rollout."""
    config = Config(
        env=EnvConfig(env_id),
        agent=agent_config,
        total_env_steps=NUM_UPDATES * T * 4,
        arch=AnakinConfig(
            num_envs=num_devices * envs_per_device,
            rollout_length=T,
            devices=tuple(range(num_devices)),
            updates_per_call=1,
        ),
    )
    a = anakin_runner.setup(config)
    state = anakin_runner.initial_state(config, a)
    before = jax.device_get(jax.tree.map(lambda x: x[0], state.agent))
    one = jax.devices()[0]
    roll = jax.jit(lambda params, envs, key: rollout(a.env, a.env_params, a.agent, params, envs, key, T)[1])
    keys, parts = [], []
    for d in range(num_devices):
        split = iteration_keys(jax.device_put(state.key[0, d], one))
        envs = jax.device_put(
            jax.tree.map(lambda x: x[0, d * envs_per_device : (d + 1) * envs_per_device], state.envs), one
        )
        parts.append(jax.device_get(roll(before.params, envs, split.rollout)))
        keys.append(split.update)
    traj = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *parts)
    after, metrics = make_train_call(a.env, a.env_params, a.agent, a.mesh, T)(state, jnp.int32(1))
    return before, traj, keys, jax.tree.map(lambda x: x[0], after.agent), metrics, a.sizes.num_updates


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "impala", "dqn"])
def test_anakin_update_equals_the_reference(name):
    """Anakin's rollout and update compiled together, on Catch (episodes of several steps)."""
    config = {"ppo": PPO, "impala": IMPALA}.get(name)
    if config is None:
        config = algorithms()["dqn"].exact_config(DQN, BatchShape(T, 4))
    before, traj, keys, after, _, num_updates = anakin_update(config, "Catch")
    if name == "dqn":
        expected, _ = dqn_update_reference(config, before, traj)
        assert_same_update(after.params.online, expected, before.params.online)
    else:
        expected, _ = expected_update(config, before.params, traj, keys, num_updates)
        assert_same_update(after.params, expected, before.params)


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


@pytest.mark.parametrize("path", ["one_device", pytest.param("sebulba_4_devices", marks=pytest.mark.slow)])
def test_sac_update_equals_the_reference(path):
    """SAC with the contract's exact config (temperature 0, a policy of negligible spread, one
    step on all of the trajectory's transitions): critics, actor and target critics. Actions
    in a box that is not `[-1, 1]`, target critics off the critics, optimizers with moments."""
    algorithm = algorithms()["sac"]
    config = dataclasses.replace(
        algorithm.exact_config(algorithm.default_probe_config(), BatchShape(T, B)), hidden_sizes=(8, 8), tau=0.3
    )
    low, high = np.array([-2.0, -1.0], np.float32), np.array([1.0, 3.0], np.float32)
    action_spec = BoxSpec((2,), low, high)
    one = make_agent(config, OBS_SPEC, action_spec, num_updates=NUM_UPDATES, axis_name=None)
    state = jax.jit(one.init)(jax.random.key(0))
    other = jax.jit(one.init)(jax.random.key(1)).opt_state.critic
    actor_optimizer, critic_optimizer = reference.sac_optimizers(config)
    opt_states = (
        warm(actor_optimizer, state.params.actor, jax.random.key(4)),
        warm(critic_optimizer, state.opt_state.critic, jax.random.key(5)),
    )
    state = state.replace(
        opt_state=state.opt_state._replace(
            target_critic=other, actor_optimizer=opt_states[0], critic_optimizer=opt_states[1]
        )
    )
    traj = trajectory(
        lambda params, obs, key: (jax.random.uniform(key, (obs.shape[0], 2), minval=low, maxval=high), {}),
        None,
        jax.random.key(2),
    )
    if path == "one_device":
        got, metrics = jax.jit(one.update)(state, traj, jax.random.key(3))
    else:
        four = make_agent(config, OBS_SPEC, action_spec, num_updates=NUM_UPDATES, axis_name=AXIS)
        got, metrics, _ = sebulba_update(four, state, traj, jax.random.key(3))
    learner = state.opt_state
    actor, critic, target, loss = reference.sac_deterministic_step(
        config,
        state.params.actor,
        learner.critic,
        learner.target_critic,
        opt_states,
        transitions(config.gamma, jax.device_get(traj)),
        low,
        high,
    )
    assert_same_update(got.opt_state.critic, critic, learner.critic)
    assert_same_update(got.params.actor, actor, state.params.actor)
    assert_same_update(got.opt_state.target_critic, target, learner.target_critic)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)
