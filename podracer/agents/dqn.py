"""DQN (Mnih et al. 2015) with a replay buffer per learner device, as a podracer `Agent`.

Options: Double DQN targets (van Hasselt et al. 2016), n-step returns, prioritized replay
with importance weights (Schaul et al. 2016), Huber or squared loss, hard or Polyak target
updates.

Where its state lives (the `AgentState` contract):
- `params` is what the actor needs, `DQNParams(online, env_steps)`: the online network and
  the number of env steps the learner has received, the position of the epsilon-greedy
  schedule. Whoever ships parameters to actors (Anakin's rollout, Sebulba's parameter
  source) ships the schedule with them, and `act` stays `act(params, obs, key)`.
- `opt_state` is learner-only replicated state, `DQNLearnerState(optimizer, target,
  gradient_steps)`: the target network rides here so actors never receive it.
- `local` is this device's replay buffer (flashbax), sharded over devices, never averaged.

`update(state, traj, key)` adds the `[T, B]` trajectory's steps to the device's buffer and,
once `learning_starts` env steps have been collected, takes gradient steps on batches
sampled from that buffer, gradients averaged over `axis_name`. `key` should differ between
devices so that each samples its own batch.

n-step returns across rollouts: the buffer holds single steps (`Step`), time-major, so the
step after slot `i` of an environment is slot `i + B` (`B` = this device's environments),
whichever rollout brought it; a sampled step's n-step target is formed from its chain of
successors when it is sampled (as Dopamine's replay does), so every transition learned from
has a true n-step target, shorter only where its episode ended. The newest `n - 1` steps of
every environment wait (held back) until their successors arrive. A rollout whose first
observation is not the one its environment's last stored step ended in (an environment
restarted, as when a Sebulba run resumes) starts a new stream: returns do not run into it.

How many steps: each update earns `config.steps_per_update(T * B)` steps of credit
(`gradient_steps`, or `replay_ratio * T * B / batch_size`); it takes the whole steps, at
most `config.max_steps_per_update(T * B)` (static), in a loop with a traced trip count (or
unrolled, `unroll_sgd`), and the fraction left rides in `DQNLearnerState.replay_credit`.
The metrics `replay_ratio` (configured) and `replay_ratio_achieved` (samples learned / env
steps received since learning started, from the counters in the state) show both.

Counters of env and gradient steps are `podracer.counters.Count`s, exact past 2**31.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from podracer import networks, ops, parallel
from podracer.agents.dqn_config import DQNConfig
from podracer.agents.minibatches import flatten_time_batch
from podracer.agents.networks import TORSOS, init_params, make_torso
from podracer.agents.registry import Algorithm
from podracer.agents.sgd import check_step_metrics, global_norm
from podracer.counters import Count
from podracer.replay.buffer import Replay, ReplaySample, Transition, make_replay, same_observations
from podracer.replay.learning import learn_steps
from podracer.replay.schedule import ReplaySchedule, replay_metrics, schedule_replay
from podracer.types import (
    Agent,
    AgentState,
    Array,
    BatchShape,
    DiscreteSpec,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    split_mask,
    zeros_like_spec,
)

__all__ = ["DQNConfig", "DQNLearnerState", "DQNParams", "Step", "add_and_schedule", "chain_targets", "dqn_loss",
           "make_dqn", "make_learn_on_batch", "sample_transitions", "to_steps", "transitions_at"]


class DQNParams(NamedTuple):
    """What `act` receives: online Q-network parameters and the schedule position."""

    online: Params
    env_steps: Count  # env steps (all devices, one seed) the learner has received


# The metrics of a gradient step, averaged over an update's steps (0 in one that takes none):
# the algorithm's `step_metrics`, checked against what `update` averages when it traces.
STEP_METRICS = ("loss", "q_mean", "td_abs", "grad_norm", "importance_weight")


class DQNLearnerState(NamedTuple):
    """`AgentState.opt_state` of DQN: replicated learner-only state."""

    optimizer: Any
    target: Params
    gradient_steps: Count  # gradient steps taken (each on `batch_size` items per device)
    replay_credit: Array  # float32 scalar: the fraction of a gradient step earned but not yet taken
    learning_env_steps: Count  # env steps (all devices) received since learning started


class Step(NamedTuple):
    """One environment step as the replay buffer holds it, `[...]` (`[N, ...]` batched).

    `first` is True where the step does not continue its environment's previous stored step
    (the first rollout, or an environment restarted): an n-step return stops before it.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    next_obs: Array
    first: Array


def make_q_network(config: DQNConfig, obs_spec: ObservationSpec, action_spec: DiscreteSpec) -> nn.Module:
    """The Q-network `config.torso` names: a built-in torso under a Q head, or a registered
    one (`podracer.networks.registry`) with `config.torso_options`, under a Q head unless it outputs
    action values itself."""
    if config.torso not in TORSOS:
        module, outputs = networks.registry.make_registered(config.torso, config.torso_options, obs_spec, action_spec)
        return module if outputs == "action_values" else networks.QNetwork(action_spec.num_actions, module)
    torso = make_torso(config.torso, config.hidden_sizes, config.activation, obs_spec)
    return networks.QNetwork(action_spec.num_actions, torso)


def make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adam(config.learning_rate, eps=config.adam_eps))


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Linear decay from `epsilon_start` to `epsilon_end` over `epsilon_decay_steps` env steps."""
    return optax.linear_schedule(config.epsilon_start, config.epsilon_end, config.epsilon_decay_steps)


def to_steps(traj: Trajectory, continues: Array) -> Step:
    """A `[T, B]` trajectory as `T * B` replay steps, time-major (`[T * B, ...]`);
    `continues [B]`: each environment's first step follows its last stored one."""
    first = jnp.zeros(traj.reward.shape, bool).at[0].set(~continues)
    return flatten_time_batch(Step(traj.obs, traj.action.astype(jnp.int32), traj.reward,
                                          traj.terminated, traj.truncated, traj.next_obs, first))


def chain_targets(chain: Step, gamma: float) -> tuple[Array, Array, Array]:
    """n-step targets of chains of consecutive steps `[M, n]` (step k is the k-th successor of
    step 0 in its environment's stream): `(return [M], discount [M], bootstrap index [M])`,
    the target of step 0 being `return + discount * Q(chain.next_obs[index])`.

    The sum stops after n rewards, at the end of an episode, or before a step that starts a
    new stream (`first`: treated as a truncation of the step before it). A terminated last
    step does not bootstrap (`discount = 0`); otherwise the target bootstraps with
    `gamma ** m` after m rewards, from the final observation of an episode cut by a time
    limit or the observation after the n-th step. Reads only the chain's scalar fields.
    """
    M, n = chain.reward.shape
    cut = chain.truncated | jnp.concatenate([chain.first[:, 1:], jnp.zeros((M, 1), bool)], axis=1)
    first_target = jax.vmap(lambda *xs: tuple(x[0] for x in ops.n_step_targets(*xs, gamma, n)))
    return first_target(chain.reward, chain.terminated, cut)


def stream_continues(replay: Replay, local: Any, obs: Array) -> Array:
    """`bool [B]`: each environment's observation `obs [B, ...]` is where its last stored step
    ended (the buffer's newest `B` slots, one per environment), so its stream goes on."""
    B = jax.tree.leaves(obs)[0].shape[0]
    previous = replay.get(local, replay.newest(local, B)).next_obs
    return (replay.size(local) >= B) & same_observations(previous, obs)


def add_and_schedule(config: Any, replay: Replay, state: AgentState, steps: Step, batch: tuple[int, int],
                     axis_name: parallel.AxisName) -> ReplaySchedule:
    """Add an update's replay `steps` (a `[T, B]` trajectory's, `batch = (T, B)`) to this
    device's buffer, the newest `(n - 1) B` held back until their successors arrive, and
    schedule the update's gradient steps (`podracer.replay.schedule_replay`): DQN's, SAC's
    and TD3's.

    Args:
        config: DQN's or SAC/TD3's config (`n_step` and the replay schedule's fields).
        replay: the buffer.
        state: the agent state before the update (`params.env_steps`, `opt_state`, `local`).
        steps: the steps to add, `[T * B, ...]` time-major (`to_steps`).
        batch: `(T, B)` of the trajectory.
        axis_name: the device axis (None: one device).

    Returns:
        The `ReplaySchedule`.
    """
    hold_back = (config.n_step - 1) * batch[1]
    local = replay.add(state.local, steps, hold_back)
    return schedule_replay(config, local, state.params.env_steps, state.opt_state, batch, axis_name, hold_back + 1)


def transitions_at(replay: Replay, local: Any, indices: Array, envs: int, config: DQNConfig) -> Transition:
    """The n-step `Transition`s `[M]` of the steps in slots `indices [M]` of a buffer filled by
    `envs` environments: each step with the chain of its `n - 1` successors, `envs` slots
    apart, of which only the scalar fields are read (XLA drops the other gathers), and the
    one observation it bootstraps from."""
    n = config.n_step
    slots = (indices[:, None] + envs * jnp.arange(n)) % config.buffer_size  # [M, n]
    M = slots.shape[0]
    chain = jax.tree.map(lambda x: x.reshape((M, n) + x.shape[1:]), replay.get(local, slots.reshape(-1)))
    returns, discount, last = chain_targets(chain, config.gamma)
    step = replay.get(local, indices)
    bootstrap = replay.get(local, slots[jnp.arange(M), last]).next_obs
    return Transition(step.obs, step.action, returns, discount, bootstrap)


def sample_transitions(replay: Replay, local: Any, key: PRNGKey, beta: Array, envs: int, config: DQNConfig
                       ) -> ReplaySample:
    """A replay sample of n-step `Transition`s (`transitions_at`); the newest `n - 1` steps of
    each of the `envs` environments are held back, their successors still to come."""
    sample = replay.sample(local, key, beta, (config.n_step - 1) * envs)
    return sample._replace(items=transitions_at(replay, local, sample.indices, envs, config))


def dqn_loss(
    params: Params,
    target_params: Params,
    apply_fn: Callable[[Params, Observation], Array],
    items: Transition,
    weights: Array,
    config: DQNConfig,
) -> tuple[Array, tuple[dict[str, Array], Array]]:
    """DQN's loss (Mnih et al. 2015) on n-step transitions: the TD error of `Q(obs, action)`
    against `reward + discount * max_a Q_target(next_obs, a)`, or with `double_q` against
    `reward + discount * Q_target(next_obs, argmax_a Q(next_obs, a))` (Double DQN, van Hasselt
    et al. 2016), the max and argmax over the legal actions of masked observations; Huber or
    half squared per item, weighted by prioritized replay's importance weights.

    Args:
      params: the online network's parameters, differentiated (not through its Q-values of
        `next_obs`, which only pick Double DQN's action).
      target_params: the target network's parameters.
      apply_fn: `(params, obs [N, ...]) -> Q-values [N, A]` (observations without their masks).
      items: `[M]` transitions: `obs`, `action`, the n-step `reward` and `discount` (0 where a
        termination ends the return), and `next_obs` the target bootstraps from.
      weights: `[M]` importance weights (1 with uniform replay).
      config: the hyperparameters read: `double_q`, `loss` ("huber" or "mse"), `huber_delta`.

    Returns:
      `(loss, (metrics, td))`: the scalar `mean(weights * per_item(td))`, the scalars `loss`,
      `q_mean` (the mean of `Q(obs)`), `td_abs` (the mean `|td|`), and `td [M]`, the TD
      errors (new priorities).
    """
    M = items.reward.shape[0]
    (obs, _), (next_obs, legal_t) = split_mask(items.obs), split_mask(items.next_obs)
    q = apply_fn(params, jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=0), obs, next_obs))
    q_tm1, q_t_online = q[:M], jax.lax.stop_gradient(q[M:])
    q_t_target = apply_fn(target_params, next_obs)
    # The bootstrap state's legal actions bound the max (and Double DQN's argmax).
    if config.double_q:
        target_value = ops.double_q_learning_target(items.reward, items.discount, q_t_target, q_t_online, legal_t)
    else:
        target_value = ops.q_learning_target(items.reward, items.discount, q_t_target, legal_t)
    td = ops.td_error(q_tm1, items.action, target_value)
    per_item = ops.huber_loss(td, config.huber_delta) if config.loss == "huber" else 0.5 * jnp.square(td)
    loss = jnp.mean(weights * per_item)
    metrics = {"loss": loss, "q_mean": jnp.mean(q_tm1), "td_abs": jnp.mean(jnp.abs(td))}
    return loss, (metrics, td)


def make_learn_on_batch(
    config: DQNConfig, network: nn.Module, optimizer: optax.GradientTransformation, axis_name: parallel.AxisName
) -> Callable[[Params, DQNLearnerState, ReplaySample], tuple[Params, DQNLearnerState, dict, Array]]:
    """`(online, learner, sample) -> (online, learner, metrics, td_error [M])`: one gradient
    step on a sampled batch (gradient averaged over `axis_name`) and the target update."""

    def loss_fn(online: Params, target: Params, items: Transition, weights: Array):
        return dqn_loss(online, target, network.apply, items, weights, config)

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)

    def learn_on_batch(online: Params, learner: DQNLearnerState, sample: ReplaySample):
        (_, (metrics, td)), grads = grad_fn(online, learner.target, sample.items, sample.weights)
        updates, opt_state = optimizer.update(grads, learner.optimizer, online)
        online = optax.apply_updates(online, updates)
        steps = learner.gradient_steps.add(1)
        due = steps.mod(config.target_update_period) == 0
        target = jax.tree.map(lambda new, old: jnp.where(due, new, old),
                              optax.incremental_update(online, learner.target, config.target_update_tau),
                              learner.target)
        metrics["grad_norm"] = global_norm(grads)
        return online, learner._replace(optimizer=opt_state, target=target, gradient_steps=steps), metrics, td

    return learn_on_batch


def make_dqn(
    config: DQNConfig,
    obs_spec: ObservationSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the DQN `Agent`.

    num_updates: how many times `update` will be called in the run (prioritized replay's
                 importance exponent reaches 1 at its last update).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    network = make_q_network(config, obs_spec, action_spec)
    optimizer = make_optimizer(config)
    replay = make_replay(config.buffer_size, config.batch_size, config.prioritized, config.priority_exponent)
    learn_on_batch = make_learn_on_batch(config, network, optimizer, axis_name)
    epsilon = epsilon_schedule(config)

    def init(key: PRNGKey) -> AgentState:
        online = init_params(network, key, obs_spec)
        learner = DQNLearnerState(optimizer.init(online), online, Count.zeros(), jnp.zeros((), jnp.float32),
                                  Count.zeros())
        return AgentState(DQNParams(online, Count.zeros()), learner, jnp.zeros((), jnp.int32),
                          replay.init(_example_step(obs_spec)))

    def act(params: DQNParams, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        """Epsilon-greedy over the online Q-values; random and greedy actions both legal."""
        inputs, legal = split_mask(obs)
        q = network.apply(params.online, inputs)
        return ops.epsilon_greedy(key, q, epsilon(params.env_steps.as_float()), legal), {}

    def greedy_act(params: DQNParams, obs: Observation) -> Array:
        """The argmax of the online Q-values among legal actions (evaluation: no exploration)."""
        inputs, legal = split_mask(obs)
        return ops.masked_argmax(network.apply(params.online, inputs), legal).astype(jnp.int32)

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        steps = to_steps(traj, stream_continues(replay, state.local, jax.tree.map(lambda x: x[0], traj.obs)))
        schedule = add_and_schedule(config, replay, state, steps, (T, B), axis_name)
        # Prioritized replay's importance exponent, annealed linearly from its initial value
        # over the env steps of the updates that learn: 1 in the last one.
        learning_steps = learning_updates(config, num_updates, T, B, num_devices) * schedule.received
        progress = jnp.minimum(schedule.learner.learning_env_steps.as_float() / learning_steps, 1.0)
        beta = config.importance_exponent + (1.0 - config.importance_exponent) * progress

        def step(carry: tuple[Params, DQNLearnerState, Any], key: PRNGKey):
            """One gradient step on n-step transitions, the sampled items' priorities updated."""
            online, learner, local = carry
            sample = sample_transitions(replay, local, key, beta, B, config)
            online, learner, metrics, td = learn_on_batch(online, learner, sample)
            local = replay.set_priorities(local, sample.indices, jnp.abs(td) + config.priority_eps)
            metrics["importance_weight"] = jnp.mean(sample.weights)
            return (online, learner, local), metrics

        (online, learner, local), metrics = learn_steps(
            step, (state.params.online, schedule.learner, schedule.local), key, schedule.num_steps,
            schedule.max_steps, axis_name, unroll=config.unroll_sgd,
        )
        check_step_metrics(metrics, STEP_METRICS, "dqn")
        if config.prioritized:
            metrics["importance_exponent"] = beta
        metrics.update(epsilon=epsilon(schedule.env_steps.as_float()),
                       **replay_metrics(config, replay, schedule._replace(local=local), learner, (T, B), axis_name))
        env_steps = schedule.env_steps
        return AgentState(DQNParams(online, env_steps), learner, state.update_count + 1, local), metrics

    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def learning_updates(config: DQNConfig, num_updates: int, T: int, B: int, num_devices: int) -> int:
    """How many of a run's `num_updates` updates of `[T, B]` steps per device learn: those from
    the first that brings `learning_starts` env steps (all devices) and leaves a step to
    sample past the held-back ones."""
    first = max(1, -(-config.learning_starts // (T * B * num_devices)),
                -(-((config.n_step - 1) * B + 1) // (T * B)))
    return max(1, num_updates - first + 1)


def _example_step(obs_spec: ObservationSpec) -> Step:
    obs = jax.tree.map(jnp.asarray, zeros_like_spec(obs_spec))  # a MaskedObs keeps its mask in replay
    false = jnp.zeros((), bool)
    return Step(obs, jnp.zeros((), jnp.int32), jnp.zeros(()), false, false, obs, false)

def _probe_config() -> DQNConfig:
    return DQNConfig(learning_rate=1e-3, buffer_size=4_096, batch_size=64, gradient_steps=2, learning_starts=512,
                     target_update_period=50, epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=4_000,
                     hidden_sizes=(32,), gamma=0.9)


def _exact_config(config: DQNConfig, batch: BatchShape) -> DQNConfig:
    """One gradient step on a sample that is the whole batch, however it is split (1-step
    targets, so no step is held back for its successors): with equal priorities, stratified
    sampling of `N` items from a device holding `N / D` of them takes each exactly `D` times
    (no sampling noise), and the loss is a mean."""
    n = batch.transitions
    return dataclasses.replace(config, prioritized=True, buffer_size=max(config.buffer_size, n), batch_size=n,
                               gradient_steps=1, replay_ratio=None, learning_starts=0, n_step=1)


ALGORITHM = Algorithm(
    name="dqn", config=DQNConfig, make=make_dqn, check_batch=DQNConfig.check_batch,
    action_spaces=(DiscreteSpec,), masks=True, structured_obs=True, probe_config=_probe_config, probe_steps=20_000,
    exact_config=_exact_config,
    step_metrics=STEP_METRICS,
)
