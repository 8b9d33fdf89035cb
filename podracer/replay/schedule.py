"""The replay schedule that DQN, SAC, TD3 and MuZero share: an update, its trajectory added to
this device's buffer, earns gradient steps at `replay_ratio` (fractions carried to the next
update) once `learning_starts` env steps are reached and every buffer holds a step to sample;
and the metrics every replay agent logs."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer import parallel
from podracer.counters import Count
from podracer.replay.buffer import Replay
from podracer.replay.sequence import SequenceReplay
from podracer.types import Array


class ReplaySchedule(NamedTuple):
    """One update's replay bookkeeping, decided before any gradient step.

    local:      this device's buffer with the trajectory added.
    env_steps:  the run's env steps after this update (all devices).
    learn:      `bool []`: the update learns (`learning_starts` reached, and a step to sample
                in every buffer).
    learner:    the learner state, `replay_credit` and `learning_env_steps` advanced.
    num_steps:  `int32 []`: the gradient steps earned (fractions carried), <= `max_steps`.
    max_steps:  the static bound of the gradient-step loop.
    per_update: gradient steps per update earned at `replay_ratio`.
    received:   env steps this update brought (all devices).
    """

    local: Any
    env_steps: Count
    learn: Array
    learner: Any
    num_steps: Array
    max_steps: int
    per_update: float
    received: int


def schedule_replay(config: Any, local: Any, env_steps: Count, learner: Any, batch: tuple[int, int],
                    axis_name: parallel.AxisName, min_received: int) -> ReplaySchedule:
    """Decide, from replicated counters so that every device decides alike, whether and how
    many gradient steps an update of a `[T, B]` trajectory takes (`config.replay_ratio`,
    `learning_starts`), its steps already added to this device's buffer.

    Args:
        config: a replay config (`steps_per_update`, `max_steps_per_update`,
            `learning_starts`): DQN's, SAC/TD3's or MuZero's.
        local: this device's buffer, the update's steps added.
        env_steps: the run's env steps (all devices, one seed) before this update.
        learner: the learner state (`replay_credit`, `learning_env_steps`) before it.
        batch: `(T, B)` of the trajectory.
        axis_name: the device axis (None: one device).
        min_received: the steps a device's buffer must have received before it holds one to
            sample: one past DQN's held-back `(n - 1) B`, a whole sequence for MuZero.

    Returns:
        The `ReplaySchedule`.
    """
    T, B = batch
    num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
    per_update = config.steps_per_update(T * B)  # static: shapes are known when tracing
    max_steps = config.max_steps_per_update(T * B)
    received = T * B * num_devices
    env_steps = env_steps.add(received)
    # Each device has received `env_steps / num_devices` steps.
    learn = env_steps.ge(max(config.learning_starts, num_devices * min_received))
    credit = learner.replay_credit + jnp.where(learn, jnp.float32(per_update), 0.0)
    num_steps = jnp.minimum(jnp.floor(credit).astype(jnp.int32), max_steps)
    learner = learner._replace(
        replay_credit=credit - num_steps.astype(jnp.float32),
        learning_env_steps=learner.learning_env_steps.add(jnp.where(learn, received, 0)),
    )
    return ReplaySchedule(local, env_steps, learn, learner, num_steps, max_steps, per_update, received)


def replay_metrics(config: Any, replay: Replay | SequenceReplay, schedule: ReplaySchedule, learner: Any,
                   batch: tuple[int, int], axis_name: parallel.AxisName) -> dict[str, Array]:
    """The replay metrics every replay agent logs: `learning`, `gradient_steps`,
    `replay_size`, `replay_ratio` (asked) and `replay_ratio_achieved` (gradient steps x
    global batch per env step since learning began), from `learner` after the steps."""
    T, B = batch
    num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
    learned = learner.gradient_steps.as_float() * (config.batch_size * num_devices)
    seen = learner.learning_env_steps.as_float()
    return dict(
        learning=schedule.learn.astype(jnp.float32), gradient_steps=schedule.num_steps.astype(jnp.float32),
        replay_size=parallel.pmean(replay.size(schedule.local).astype(jnp.float32), axis_name),
        replay_ratio=jnp.float32(schedule.per_update * config.batch_size / (T * B)),
        replay_ratio_achieved=jnp.where(seen > 0, learned / jnp.maximum(seen, 1.0), 0.0),
    )
