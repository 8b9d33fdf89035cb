"""What SAC and TD3 share around their gradient step: the replay buffer in
`AgentState.local`, acting before `learning_starts`, how many gradient steps an update takes,
and the memory a buffer needs.

The buffer holds DQN's `Step`s (float actions: the box action the environment got) and
forms n-step targets when it samples, with DQN's functions (`podracer.agents.dqn`): a
terminated episode does not bootstrap, a truncated one bootstraps from its final observation,
and a return never runs into another episode or a restarted stream. Each update adds its
`[T, B]` steps, earns `steps_per_update` gradient steps of credit once `learning_starts` env
steps have arrived, takes the whole ones (a loop with a traced trip count) and carries the
fraction in `ContinuousLearnerState.replay_credit`, as DQN does.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import parallel
from podracer.agents.continuous.config import ReplayActorCriticConfig
from podracer.agents.dqn import Step, add_and_schedule, sample_transitions, stream_continues
from podracer.agents.minibatches import flatten_time_batch
from podracer.agents.sgd import check_step_metrics
from podracer.config import ConfigError
from podracer.counters import Count
from podracer.replay.buffer import Replay, Transition, make_replay
from podracer.replay.learning import learn_steps
from podracer.replay.schedule import replay_metrics
from podracer.types import AgentState, Array, BoxSpec, ObservationSpec, Params, PRNGKey, Trajectory, zeros_like_spec


class ContinuousParams(NamedTuple):
    """What `act` receives: the actor's parameters and the env steps the learner has received
    (all devices, one seed): acting is uniformly random before `learning_starts`."""

    actor: Params
    env_steps: Count


class ContinuousLearnerState(NamedTuple):
    """`AgentState.opt_state` of SAC and TD3: replicated learner-only state.

    `extra` is the algorithm's own: SAC's temperature and its optimiser, TD3's target actor.
    `critic` is the critics' flax variables (CrossQ's with their `batch_stats`);
    `target_critic` is `()` for critics without targets (`critics.Critics.has_target`).
    """

    critic: Params
    target_critic: Params
    actor_optimizer: Any
    critic_optimizer: Any
    extra: Any
    gradient_steps: Count  # gradient steps taken (each on `batch_size` items per device)
    replay_credit: Array  # float32 scalar: the fraction of a gradient step earned but not yet taken
    learning_env_steps: Count  # env steps (all devices) received since learning started


# `(actor, learner, batch, key) -> (actor, learner, metrics)`: one gradient step
LearnOnBatch = Callable[[Params, ContinuousLearnerState, Transition, PRNGKey],
                        tuple[Params, ContinuousLearnerState, dict[str, Array]]]


def example_step(obs_spec: ObservationSpec, action_spec: BoxSpec) -> Step:
    """One replay `Step` of zeros (the buffer's item)."""
    obs = jnp.asarray(zeros_like_spec(obs_spec))
    false = jnp.zeros((), bool)
    return Step(obs, jnp.zeros(tuple(action_spec.shape), jnp.float32), jnp.zeros(()), false, false, obs, false)


def bytes_per_transition(obs_spec: ObservationSpec, action_spec: BoxSpec) -> int:
    """Bytes one stored step takes: observation and next observation, action, reward and
    three flags (a prioritized/stratified buffer adds about 8 bytes of sum tree per slot)."""
    return sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape))
               for x in jax.tree.leaves(jax.eval_shape(lambda: example_step(obs_spec, action_spec))))


def check_buffer_fits(config: ReplayActorCriticConfig, obs_spec: ObservationSpec, action_spec: BoxSpec) -> None:
    """ConfigError naming `agent.buffer_size` when one device's buffer cannot fit in the
    memory the first device reports (`memory_stats()['bytes_limit']`); no check where the
    device reports none (CPU)."""
    need = config.buffer_size * (bytes_per_transition(obs_spec, action_spec)
                                 + (8 if config.sampling == "stratified" else 0))
    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    if limit is not None and need > limit:
        raise ConfigError(f"agent.buffer_size {config.buffer_size} needs {need / 2**30:.2f} GiB per device, more "
                          f"than the {limit / 2**30:.2f} GiB {jax.devices()[0].device_kind} has; lower it")


def to_steps(traj: Trajectory, continues: Array) -> Step:
    """A `[T, B]` trajectory as `T * B` replay steps, time-major (`[T * B, ...]`);
    `continues [B]`: each environment's first step follows its last stored one."""
    first = jnp.zeros(traj.reward.shape, bool).at[0].set(~continues)
    return flatten_time_batch(Step(traj.obs, traj.action.astype(jnp.float32), traj.reward,
                                          traj.terminated, traj.truncated, traj.next_obs, first))


def make_buffer(config: ReplayActorCriticConfig) -> Replay:
    """The per-device buffer: uniform, or stratified (flashbax's sum tree at equal
    priorities, which are never changed)."""
    return make_replay(config.buffer_size, config.batch_size, prioritized=config.sampling == "stratified")


def initial_state(actor: Params, learner: ContinuousLearnerState, replay: Replay, obs_spec: ObservationSpec,
                  action_spec: BoxSpec) -> AgentState:
    return AgentState(ContinuousParams(actor, Count.zeros()), learner, jnp.zeros((), jnp.int32),
                      replay.init(example_step(obs_spec, action_spec)))


def random_until_learning(config: ReplayActorCriticConfig, action_spec: BoxSpec, params: ContinuousParams,
                          key: PRNGKey, action: Array) -> Array:
    """`action [B, A]`, or before `learning_starts` env steps uniform random actions in the box."""
    random = jax.random.uniform(key, action.shape, action.dtype, jnp.asarray(action_spec.low),
                                jnp.asarray(action_spec.high))
    return jnp.where(params.env_steps.ge(config.learning_starts), action, random)


def make_replay_update(config: ReplayActorCriticConfig, replay: Replay, learn_on_batch: LearnOnBatch,
                       axis_name: parallel.AxisName, step_metrics: tuple[str, ...], name: str):
    """`update(state, traj, key) -> (state, metrics)`: add the trajectory to this device's
    buffer, then take the gradient steps earned (`learn_on_batch` on n-step batches), each
    device sampling its own batch (`key` differs between devices) and averaging gradients."""

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape
        steps = to_steps(traj, stream_continues(replay, state.local, jax.tree.map(lambda x: x[0], traj.obs)))
        schedule = add_and_schedule(config, replay, state, steps, (T, B), axis_name)
        local = schedule.local

        def step(carry: tuple[Params, ContinuousLearnerState], key: PRNGKey):
            sample_key, learn_key = jax.random.split(key)
            items = sample_transitions(replay, local, sample_key, jnp.float32(1.0), B, config).items
            actor, learner, metrics = learn_on_batch(*carry, items, learn_key)
            return (actor, learner), metrics

        (actor, learner), metrics = learn_steps(step, (state.params.actor, schedule.learner), key, schedule.num_steps,
                                                schedule.max_steps, axis_name)
        check_step_metrics(metrics, step_metrics, name)
        metrics.update(replay_metrics(config, replay, schedule, learner, (T, B), axis_name))
        env_steps = schedule.env_steps
        return AgentState(ContinuousParams(actor, env_steps), learner, state.update_count + 1, local), metrics

    return update
