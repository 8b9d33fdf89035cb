"""MuZero's learner: rollouts into the per-device sequence buffer, gradient steps on
sampled sequences at a bounded replay ratio (as DQN's), gradients averaged over the mesh.

No reanalyse: the value targets bootstrap from the root values the search computed when
acting, and the policy targets are the search policies of that time.

A sampled sequence may run from one rollout into the next. The steps hold no `next_obs`, so
the buffer stashes each environment's last one (`SequenceReplay.stash`); where the next
rollout does not start from it (Sebulba restarts its environments on resume, the buffers
restored), the newest stored step is marked truncated and bootstraps from the value of the
stashed observation (`end_restarted_streams`), so no target or unroll crosses the join.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer import ops, parallel
from podracer.agents.muzero.config import MuZeroConfig
from podracer.agents.muzero.losses import sequence_loss
from podracer.agents.muzero.networks import MuZeroNetwork
from podracer.agents.sgd import check_step_metrics, global_norm
from podracer.counters import Count
from podracer.replay.buffer import same_observations
from podracer.replay.learning import learn_steps
from podracer.replay.schedule import replay_metrics, schedule_replay
from podracer.replay.sequence import SequenceReplay, SequenceSample, make_sequence_replay
from podracer.types import AgentState, Array, Params, PRNGKey, Trajectory


class ReplayStep(NamedTuple):
    """One step as the buffer holds it (`[...]`; `[T, B, ...]` for a rollout).

    final_value: where the episode was truncated after this step, the value of its final
                 observation under the parameters that added it (the bootstrap of a
                 truncated episode; for a stream cut where its environment restarted, under
                 the parameters that found the cut); 0 elsewhere.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    search_policy: Array
    root_value: Array
    final_value: Array


class MuZeroLearnerState(NamedTuple):
    """`AgentState.opt_state` of MuZero: replicated learner-only state."""

    optimizer: Any
    gradient_steps: Count  # gradient steps taken (each on `batch_size` sequences per device)
    replay_credit: Array  # float32: the fraction of a gradient step earned but not yet taken
    env_steps: Count  # env steps (all devices, one seed) received
    learning_env_steps: Count  # env steps (all devices) received since learning started


def make_optimizer(config: MuZeroConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adamw(config.learning_rate, eps=config.adam_eps, weight_decay=config.weight_decay))


def make_replay(config: MuZeroConfig) -> SequenceReplay:
    return make_sequence_replay(config.buffer_size, config.sequence_length, config.batch_size, lookahead=True)


def example_step(obs_shape: tuple[int, ...], obs_dtype: Any, num_actions: int) -> ReplayStep:
    """A zero `ReplayStep` (shapes and dtypes the buffer is built with)."""
    scalar = jnp.zeros((), jnp.float32)
    flag = jnp.zeros((), bool)
    return ReplayStep(jnp.zeros(obs_shape, obs_dtype), jnp.zeros((), jnp.int32), scalar, flag, flag,
                      jnp.zeros((num_actions,), jnp.float32), scalar, scalar)


def values_where(network: MuZeroNetwork, params: Params, obs: Array, where: Array, value_max: float) -> Array:
    """`[N]`: the predicted value of `obs [N, ...]` where `where [N]`, else 0. The network runs
    only when some `where` holds (time limits and restarts: rare)."""

    def evaluate(carry: tuple[Array, Array]) -> tuple[Array, Array]:
        latent = network.apply(params, obs, method=MuZeroNetwork.represent)
        _, value_logits = network.apply(params, latent, method=MuZeroNetwork.predict)
        value = ops.categorical_to_scalar(value_logits, value_max)
        return jnp.zeros_like(carry[0]), jnp.where(where, value, 0.0)

    # A loop that runs its body at most once: `lax.cond` fails under vmap in shard_map.
    # The start is derived from `where`, so it has its (device-varying) type.
    start = (jnp.any(where), jnp.where(where, 0.0, 0.0).astype(jnp.float32))
    return jax.lax.while_loop(lambda carry: carry[0], evaluate, start)[1]


def final_values(network: MuZeroNetwork, params: Params, traj: Trajectory, value_max: float) -> Array:
    """`[T, B]`: the predicted value of `next_obs` where a step was truncated, else 0."""
    T, B = traj.reward.shape
    flat = traj.next_obs.reshape((T * B,) + traj.next_obs.shape[2:])
    return values_where(network, params, flat, traj.truncated.reshape(T * B), value_max).reshape(T, B)


def end_restarted_streams(network: MuZeroNetwork, params: Params, replay: SequenceReplay, local: Any, obs: Array,
                          value_max: float) -> Any:
    """`local` with each environment's newest stored step ended where the rollout's first
    observation `obs [B, ...]` is not the next observation stashed after it (the environment
    restarted): marked truncated, its `final_value` the value of the stashed observation under
    `params`. Where the stream goes on, or the step had ended, nothing changes."""
    B = obs.shape[0]
    stashed = replay.stashed(local, B)
    newest: ReplayStep = replay.newest(local, B)
    cut = ((replay.size(local) >= B) & ~newest.terminated & ~newest.truncated
           & ~same_observations(stashed, obs.astype(stashed.dtype)))
    return replay.end_streams(local, cut, {"final_value": values_where(network, params, stashed, cut, value_max)})


def to_replay_steps(network: MuZeroNetwork, params: Params, traj: Trajectory, example: ReplayStep,
                    value_max: float) -> ReplayStep:
    """A rollout `[T, B, ...]` as buffer steps, cast to the buffer's dtypes."""
    steps = ReplayStep(
        traj.obs, traj.action, traj.reward, traj.terminated, traj.truncated, traj.extras["search_policy"],
        traj.extras["root_value"], final_values(network, params, traj, value_max),
    )
    return jax.tree.map(lambda x, e: jnp.asarray(x).astype(e.dtype), steps, example)


# The metrics of a gradient step, averaged over an update's steps (0 in one that takes none):
# the algorithm's `step_metrics`, checked against what `update` averages when it traces.
STEP_METRICS = ("loss", "value_loss", "policy_loss", "reward_loss", "value_error", "policy_entropy", "grad_norm")


def make_learn_on_batch(
    config: MuZeroConfig, network: MuZeroNetwork, optimizer: optax.GradientTransformation,
    axis_name: parallel.AxisName,
) -> Callable[[Params, Any, SequenceSample], tuple[Params, Any, dict[str, Array]]]:
    """`(params, optimizer state, sample, lr_scale) -> (params, optimizer state, metrics)`:
    one gradient step on sampled sequences, the gradient averaged over `axis_name`, the
    optimizer's step multiplied by `lr_scale` (AdamW's step, weight decay included, is
    proportional to its learning rate: this is the learning rate times `lr_scale`)."""

    def loss(params: Params, sample: SequenceSample) -> tuple[Array, dict[str, Array]]:
        return sequence_loss(params, network, sample.items, config)

    grad_fn = parallel.value_and_mean_grad(loss, axis_name, has_aux=True)

    def learn_on_batch(params: Params, opt_state: Any, sample: SequenceSample, lr_scale: Array = 1.0):
        (_, metrics), grads = grad_fn(params, sample)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: u * jnp.asarray(lr_scale, u.dtype), updates)
        metrics["grad_norm"] = global_norm(grads)
        return optax.apply_updates(params, updates), opt_state, metrics

    return learn_on_batch


def make_update(
    config: MuZeroConfig, network: MuZeroNetwork, optimizer: optax.GradientTransformation,
    replay: SequenceReplay, example: ReplayStep, axis_name: parallel.AxisName, num_updates: int,
) -> Callable[[AgentState, Trajectory, PRNGKey], tuple[AgentState, dict[str, Array]]]:
    """The `Agent.update` of MuZero: add the rollout to this device's buffer, then take the
    gradient steps the replay ratio has earned (none before `learning_starts` env steps or
    before the buffer holds a whole sequence). `key` should differ between devices. With
    `anneal_lr`, the learning rate decays linearly to 0 over the run's `num_updates`
    updates' env steps."""
    learn_on_batch = make_learn_on_batch(config, network, optimizer, axis_name)

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape
        local = end_restarted_streams(network, state.params, replay, state.local, traj.obs[0], config.value_max)
        local = replay.add(local, to_replay_steps(network, state.params, traj, example, config.value_max))
        local = replay.stash(local, traj.next_obs[-1])
        learner: MuZeroLearnerState = state.opt_state
        # A device's buffer can be sampled once it holds a whole sequence of each environment.
        schedule = schedule_replay(config, local, learner.env_steps, learner, (T, B), axis_name,
                                   (config.sequence_length - 1) * B + 1)
        learner = schedule.learner._replace(env_steps=schedule.env_steps,
                                            gradient_steps=learner.gradient_steps.add(schedule.num_steps))
        total = num_updates * schedule.received  # static: the run's env steps
        lr_scale = 1.0 - jnp.minimum(learner.env_steps.as_float() / total, 1.0) if config.anneal_lr else 1.0

        def step(carry: tuple[Params, Any], key: PRNGKey):
            params, opt_state, metrics = learn_on_batch(*carry, replay.sample(local, key, B), lr_scale)
            return (params, opt_state), metrics

        (params, opt_state), metrics = learn_steps(step, (state.params, learner.optimizer), key, schedule.num_steps,
                                                   schedule.max_steps, axis_name)
        check_step_metrics(metrics, STEP_METRICS, "muzero")
        metrics.update(replay_metrics(config, replay, schedule, learner, (T, B), axis_name))
        metrics.update(learning_rate=jnp.float32(config.learning_rate) * lr_scale,
                       root_value=parallel.pmean(jnp.mean(traj.extras["root_value"]), axis_name))
        learner = learner._replace(optimizer=opt_state)
        return AgentState(params, learner, state.update_count + 1, local), metrics

    return update


def initial_learner_state(optimizer: optax.GradientTransformation, params: Params) -> MuZeroLearnerState:
    return MuZeroLearnerState(optimizer.init(params), Count.zeros(), jnp.zeros((), jnp.float32), Count.zeros(),
                              Count.zeros())
