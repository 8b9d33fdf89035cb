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

`update(state, traj, key)` turns the `[T, B]` trajectory into n-step transitions, adds them
to the device's buffer, and, once `learning_starts` env steps have been collected, takes
gradient steps on batches sampled from that buffer, gradients averaged over `axis_name`.
`key` should differ between devices so that each samples its own batch.

How many steps: each update earns `config.steps_per_update(T * B)` steps of credit
(`gradient_steps`, or `replay_ratio * T * B / batch_size`); it takes the whole steps, at
most `config.max_steps_per_update(T * B)` (static), in a loop with a traced trip count (or
unrolled, `unroll_sgd`), and the fraction left rides in `DQNLearnerState.replay_credit`.
The metrics `replay_ratio` (configured) and `replay_ratio_achieved` (samples learned / env
steps received since learning started, from the counters in the state) show both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from podracer import networks, networks_prefix, ops, parallel
from podracer.agents import common
from podracer.agents.registry import Algorithm
from podracer.agents.dqn_config import DQNConfig
from podracer.config import check
from podracer.replay import ReplaySample, Transition, make_replay
from podracer.types import (Agent, AgentState, Array, BatchShape, DiscreteSpec, Observation, ObservationSpec, Params,
                            PRNGKey, Trajectory, network_obs_spec, split_mask, zeros_like_spec)

__all__ = ["DQNConfig", "DQNLearnerState", "DQNParams", "make_dqn", "make_learn_on_batch", "to_transitions"]


class DQNParams(NamedTuple):
    """What `act` receives: online Q-network parameters and the schedule position."""

    online: Params
    env_steps: Array  # int32 scalar: env steps (all devices, one seed) the learner has received


class DQNLearnerState(NamedTuple):
    """`AgentState.opt_state` of DQN: replicated learner-only state."""

    optimizer: Any
    target: Params
    gradient_steps: Array  # int32 scalar: gradient steps taken (each on `batch_size` items per device)
    replay_credit: Array  # float32 scalar: the fraction of a gradient step earned but not yet taken
    learning_env_steps: Array  # int32 scalar: env steps (all devices) received since learning started


def make_q_network(config: DQNConfig, obs_spec: ObservationSpec, action_spec: DiscreteSpec) -> nn.Module:
    """The Q-network `config.torso` names; "prefix_conv" is PrefixRL's fully convolutional
    one and needs a grid observation `[N, N, C]` (C >= 4) with `2 * N * N` actions."""
    if config.torso == "prefix_conv":
        shape = tuple(network_obs_spec(obs_spec).shape)
        fits = len(shape) == 3 and shape[0] == shape[1] and shape[2] >= 4
        check(fits and action_spec.num_actions == 2 * shape[0] * shape[0], "agent.torso",
              "'prefix_conv' needs a prefix-adder environment (observation [N, N, C], 2 N^2 actions)",
              f"{config.torso} with observation {shape} and {action_spec.num_actions} actions")
        return networks_prefix.ScalarizedPrefixQNetwork(config.prefix_blocks, config.prefix_channels)
    torso = common.make_torso(config.torso, config.hidden_sizes, config.activation, obs_spec)
    return networks.QNetwork(action_spec.num_actions, torso)


def make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adam(config.learning_rate, eps=config.adam_eps))


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Linear decay from `epsilon_start` to `epsilon_end` over `epsilon_decay_steps` env steps."""
    return optax.linear_schedule(config.epsilon_start, config.epsilon_end, config.epsilon_decay_steps)


def to_transitions(traj: Trajectory, gamma: float, n: int) -> Transition:
    """A `[T, B]` trajectory as `T * B` n-step transitions `[T * B, ...]`: steps after a
    termination do not bootstrap (`discount = 0`), those after a truncation bootstrap from
    the episode's final observation (`traj.next_obs`)."""
    returns, discount, last = jax.vmap(ops.n_step_targets, in_axes=(1, 1, 1, None, None), out_axes=1)(
        traj.reward, traj.terminated, traj.truncated, gamma, n
    )
    take = lambda obs, index: jax.tree.map(lambda x: x[index], obs)  # noqa: E731 (obs may be a MaskedObs)
    bootstrap_obs = jax.vmap(take, in_axes=(1, 1), out_axes=1)(traj.next_obs, last)
    transitions = Transition(traj.obs, traj.action.astype(jnp.int32), returns, discount, bootstrap_obs)
    return common.flatten_time_batch(transitions)


def make_learn_on_batch(
    config: DQNConfig, network: nn.Module, optimizer: optax.GradientTransformation, axis_name: parallel.AxisName
) -> Callable[[Params, DQNLearnerState, ReplaySample], tuple[Params, DQNLearnerState, dict, Array]]:
    """`(online, learner, sample) -> (online, learner, metrics, td_error [M])`: one gradient
    step on a sampled batch (gradient averaged over `axis_name`) and the target update."""

    def loss_fn(online: Params, target: Params, items: Transition, weights: Array):
        M = items.reward.shape[0]
        (obs, _), (next_obs, legal_t) = split_mask(items.obs), split_mask(items.next_obs)
        q = network.apply(online, jnp.concatenate([obs, next_obs], axis=0))
        q_tm1, q_t_online = q[:M], jax.lax.stop_gradient(q[M:])
        q_t_target = network.apply(target, next_obs)
        # The bootstrap state's legal actions bound the max (and Double DQN's argmax).
        if config.double_q:
            target_value = ops.double_q_learning_target(items.reward, items.discount, q_t_target, q_t_online,
                                                        legal_t)
        else:
            target_value = ops.q_learning_target(items.reward, items.discount, q_t_target, legal_t)
        td = ops.td_error(q_tm1, items.action, target_value)
        per_item = ops.huber_loss(td, config.huber_delta) if config.loss == "huber" else 0.5 * jnp.square(td)
        loss = jnp.mean(weights * per_item)
        metrics = {"loss": loss, "q_mean": jnp.mean(q_tm1), "td_abs": jnp.mean(jnp.abs(td))}
        return loss, (metrics, td)

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)

    def learn_on_batch(online: Params, learner: DQNLearnerState, sample: ReplaySample):
        (_, (metrics, td)), grads = grad_fn(online, learner.target, sample.items, sample.weights)
        updates, opt_state = optimizer.update(grads, learner.optimizer, online)
        online = optax.apply_updates(online, updates)
        steps = learner.gradient_steps + 1
        due = steps % config.target_update_period == 0
        target = jax.tree.map(lambda new, old: jnp.where(due, new, old),
                              optax.incremental_update(online, learner.target, config.target_update_tau),
                              learner.target)
        metrics["grad_norm"] = optax.tree.norm(grads)
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

    num_updates: how many times `update` will be called in the run (anneals the
                 importance-sampling exponent of prioritized replay to 1 over the run).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    network = make_q_network(config, obs_spec, action_spec)
    optimizer = make_optimizer(config)
    replay = make_replay(config.buffer_size, config.batch_size, config.prioritized, config.priority_exponent)
    learn_on_batch = make_learn_on_batch(config, network, optimizer, axis_name)
    epsilon = epsilon_schedule(config)

    def init(key: PRNGKey) -> AgentState:
        online = common.init_params(network, key, obs_spec)
        zero = jnp.zeros((), jnp.int32)
        learner = DQNLearnerState(optimizer.init(online), online, zero, jnp.zeros((), jnp.float32), zero)
        return AgentState(DQNParams(online, zero), learner, zero, replay.init(_example_item(obs_spec)))

    def act(params: DQNParams, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        """Epsilon-greedy over the online Q-values; random and greedy actions both legal."""
        inputs, legal = split_mask(obs)
        q = network.apply(params.online, inputs)
        return ops.epsilon_greedy(key, q, epsilon(params.env_steps), legal), {}

    def greedy_act(params: DQNParams, obs: Observation) -> Array:
        """The argmax of the online Q-values among legal actions (evaluation: no exploration)."""
        inputs, legal = split_mask(obs)
        return ops.masked_argmax(network.apply(params.online, inputs), legal).astype(jnp.int32)

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        per_update = config.steps_per_update(T * B)  # static: shapes are known when tracing
        max_steps = config.max_steps_per_update(T * B)
        local = replay.add(state.local, to_transitions(traj, config.gamma, config.n_step))
        received = T * B * num_devices
        env_steps = state.params.env_steps + received
        learn = env_steps >= config.learning_starts
        learner = state.opt_state
        credit = learner.replay_credit + jnp.where(learn, jnp.float32(per_update), 0.0)
        num_steps = jnp.minimum(jnp.floor(credit).astype(jnp.int32), max_steps)
        learner = learner._replace(
            replay_credit=credit - num_steps.astype(jnp.float32),
            learning_env_steps=learner.learning_env_steps + jnp.where(learn, received, 0),
        )
        # Prioritized replay's importance exponent reaches 1 after the run's expected steps.
        beta = optax.linear_schedule(config.importance_exponent, 1.0, max(1, math.ceil(num_updates * per_update)))
        online, learner, local, metrics = learn_steps(
            state.params.online, learner, local, key, num_steps, max_steps, beta
        )
        learned = learner.gradient_steps.astype(jnp.float32) * (config.batch_size * num_devices)
        seen = learner.learning_env_steps.astype(jnp.float32)
        metrics.update(
            epsilon=epsilon(env_steps), learning=learn.astype(jnp.float32),
            gradient_steps=num_steps.astype(jnp.float32),
            replay_size=parallel.pmean(replay.size(local).astype(jnp.float32), axis_name),
            replay_ratio=jnp.float32(per_update * config.batch_size / (T * B)),
            replay_ratio_achieved=jnp.where(seen > 0, learned / jnp.maximum(seen, 1.0), 0.0),
        )
        return AgentState(DQNParams(online, env_steps), learner, state.update_count + 1, local), metrics

    def learn_steps(online: Params, learner: DQNLearnerState, local: Any, key: PRNGKey, num_steps: Array,
                    max_steps: int, beta: optax.Schedule):
        """`num_steps` (traced, <= `max_steps`) gradient steps; metrics are their means (0 if none)."""
        keys = jax.random.split(key, max_steps)

        def one_step(online: Params, learner: DQNLearnerState, local: Any, key: PRNGKey):
            sample = replay.sample(local, key, beta(learner.gradient_steps))
            online, learner, metrics, td = learn_on_batch(online, learner, sample)
            local = replay.set_priorities(local, sample.indices, jnp.abs(td) + config.priority_eps)
            metrics["importance_weight"] = jnp.mean(sample.weights)
            return online, learner, local, varying(metrics)

        def body(i: Array, carry: tuple) -> tuple:
            online, learner, local, sums = carry
            online, learner, local, metrics = one_step(online, learner, local, keys[i])
            return online, learner, local, jax.tree.map(jnp.add, sums, metrics)

        shapes = jax.eval_shape(one_step, online, learner, local, keys[0])[-1]
        sums = varying(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
        carry = (online, learner, local, sums)
        if config.unroll_sgd:
            # XLA:CPU runs convolution gradients inside a loop body (or a cond branch) many
            # times slower than outside one: unroll `max_steps` steps and keep the results of
            # the first `num_steps`: at most one step is computed in vain once learning has
            # started (none when the credit per update is whole), but all of them before.
            # Leaves that a step does not change (a uniform buffer's items) pass through.
            for i in range(max_steps):
                new = body(i, carry)
                take = i < num_steps
                carry = jax.tree.map(lambda n, o: o if n is o else jnp.where(take, n, o), new, carry)
        else:
            carry = jax.lax.fori_loop(0, num_steps, body, carry)
        online, learner, local, sums = carry
        means = jax.tree.map(lambda x: x / jnp.maximum(num_steps, 1).astype(x.dtype), sums)
        return online, learner, local, parallel.pmean(means, axis_name)

    def varying(tree: Any) -> Any:
        # The per-step metrics mix device-varying (loss) and invariant (grad_norm) values; a
        # loop carry needs one type, so all are summed as varying and averaged after.
        return tree if axis_name is None else parallel.to_varying(tree, axis_name)

    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def _example_item(obs_spec: ObservationSpec) -> Transition:
    obs = jax.tree.map(jnp.asarray, zeros_like_spec(obs_spec))  # a MaskedObs keeps its mask in replay
    return Transition(obs, jnp.zeros((), jnp.int32), jnp.zeros(()), jnp.zeros(()), obs)


def _probe_config() -> DQNConfig:
    return DQNConfig(learning_rate=1e-3, buffer_size=4_096, batch_size=64, gradient_steps=2, learning_starts=512,
                     target_update_period=50, epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=4_000,
                     hidden_sizes=(32,), gamma=0.9)


def _exact_config(config: DQNConfig, batch: BatchShape) -> DQNConfig:
    """One gradient step on a sample that is the whole batch, however it is split: with equal
    priorities, stratified sampling of `N` items from a device holding `N / D` of them takes
    each exactly `D` times (no sampling noise), and the loss is a mean."""
    n = batch.transitions
    return dataclasses.replace(config, prioritized=True, buffer_size=max(config.buffer_size, n), batch_size=n,
                               gradient_steps=1, replay_ratio=None, learning_starts=0)


ALGORITHM = Algorithm(
    name="dqn", config=DQNConfig, make=make_dqn, check_batch=DQNConfig.check_batch,
    action_spaces=(DiscreteSpec,), masks=True, probe_config=_probe_config, probe_steps=20_000,
    exact_config=_exact_config,
)
