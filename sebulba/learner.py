"""The learner: the agent's own `update`, compiled under `jax.shard_map` over the learner
devices, fed with one trajectory from every actor thread per update.

`make_update_step` is the whole device program (the Anakin parity test calls it on a
given trajectory); `Learner.run` is the thread around it.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from podracer.agents.registry import checked_update
from podracer.distributed import NO_WAITS, Waits
from podracer.parallel import local_copy, process_sum
from podracer.runner.device_state import add_device_axis, agent_state_specs, strip_device_axis
from podracer.runner.episodes import EpisodeStats
from podracer.runner.guard import all_finite, check_finite
from podracer.types import Agent, AgentState, Metrics, PRNGKey, Trajectory
from sebulba.actor import RolloutItem
from sebulba.params import ParamSource
from sebulba.threads import get

STOP_POLL_S = 0.5  # how often a learner waiting for trajectories checks for a stop request (one process)
STUCK_S = 10.0  # after a stop request, how long a single-process learner still waits on an actor

AXIS = "learner"  # the learner mesh's axis: the agent averages gradients over it

UpdateStep = Callable[[AgentState, tuple[Trajectory, ...], PRNGKey], tuple[AgentState, Metrics]]


def trajectory_sharding(mesh: Mesh) -> NamedSharding:
    """Trajectories `[T, B, ...]` are split over the learner devices along B."""
    return NamedSharding(mesh, P(None, AXIS))


def state_specs(state: AgentState) -> AgentState:
    """Partition specs of a learner state (or any tree of the same structure) on the learner
    mesh: `params`, `opt_state` and `update_count` replicated (`P()`); `local`, the agent's
    per-device state such as a replay buffer, `[D, ...]` with one slice per learner device
    (`P(AXIS)`), never averaged."""
    return agent_state_specs(state, AXIS)


def make_update_step(agent: Agent, mesh: Mesh) -> UpdateStep:
    """`(state, trajectories, keys [D]) -> (state, metrics)`, jitted.

    state:        placed with `state_specs`: replicated over `mesh` but for `local`,
                  `[D, ...]` sharded over it; each device sees its own slice without the
                  device axis. `state.local` is donated (a replay buffer is updated in
                  place, not copied), so the caller must not use the old one again; the
                  replicated part is not, and survives an update that fails.
    trajectories: a tuple of `[T, B_k, ...]` trajectories sharded with
                  `trajectory_sharding(mesh)`; each device joins its shards along the
                  batch axis (no communication) and runs `agent.update` on them.
    keys:         one key per learner device, sharded over `mesh`.

    `step.compile(state, trajectories, keys)` compiles it ahead for such inputs: the
    learner does before its first update, so that no wait on the other processes
    includes compiling.
    """

    update = checked_update(agent.update, AXIS)  # metrics already averaged by the agent

    def per_device(state: AgentState, trajectories: tuple[Trajectory, ...], keys: PRNGKey):
        trajectory = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *trajectories)
        # Per-device state is seen without its device axis: `[1, ...] -> [...]` and back.
        state = state.replace(local=strip_device_axis(state.local))
        state, metrics = update(state, trajectory, keys[0])
        return state.replace(local=add_device_axis(state.local)), metrics

    def update_step(replicated: AgentState, local: Any, trajectories: tuple[Trajectory, ...], keys: PRNGKey):
        state = replicated.replace(local=local)
        specs = state_specs(state)
        sharded = jax.shard_map(
            per_device, mesh=mesh, in_specs=(specs, P(None, AXIS), P(AXIS)), out_specs=(specs, P())
        )
        return sharded(state, trajectories, keys)

    jitted = jax.jit(update_step, donate_argnums=1)
    executable: list[Any] = []  # the program compiled ahead, once `compile` has run

    def step(state: AgentState, trajectories: tuple[Trajectory, ...], keys: PRNGKey):
        run = executable[0] if executable else jitted
        return run(state.replace(local=None), state.local, trajectories, keys)

    def compile_ahead(state: AgentState, trajectories: tuple[Trajectory, ...], keys: PRNGKey) -> None:
        executable[:] = [jitted.lower(state.replace(local=None), state.local, trajectories, keys).compile()]

    step.compile = compile_ahead  # type: ignore[attr-defined]
    return step


def compile_ahead(update_step: UpdateStep, state: AgentState, trajectories: tuple[Trajectory, ...],
                  keys: PRNGKey) -> None:
    """Compile `update_step` now for these inputs if it can (`make_update_step`'s can;
    a stand-in without `compile` compiles at its first call)."""
    compile_step = getattr(update_step, "compile", None)
    if compile_step is not None:
        compile_step(state, trajectories, keys)


def device_keys(key: PRNGKey, mesh: Mesh) -> PRNGKey:
    """`[D]` keys from `key`, one per learner device, placed on `mesh`."""
    return jax.device_put(jax.random.split(key, mesh.devices.size), NamedSharding(mesh, P(AXIS)))


def make_key_split(mesh: Mesh) -> Callable[[PRNGKey], tuple[PRNGKey, PRNGKey]]:
    """`key -> (next key, keys [D])`, jitted: the learner's key stays replicated over `mesh`
    (so it can be checkpointed with any number of processes); the step's keys are split
    one per learner device as `device_keys` does."""

    def split(key: PRNGKey) -> tuple[PRNGKey, PRNGKey]:
        key, step_key = jax.random.split(key)
        return key, jax.random.split(step_key, mesh.devices.size)

    return jax.jit(split, out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))))


class LearnerState(NamedTuple):
    """What a Sebulba checkpoint holds on the devices: the agent state (placed with
    `state_specs`) and the learner's key (replicated). Environments live in the host's
    EnvPool and restart on resume."""

    agent: AgentState
    key: PRNGKey


class UpdateRecord(NamedTuple):
    """What one update reports to the metrics (host values)."""

    update: int  # updates applied, this one included
    metrics: dict[str, np.ndarray]
    items: list[RolloutItem]  # this process's
    policy_lag: list[int]  # per trajectory: versions between acting and this update
    wait_s: float  # learner waiting for trajectories
    update_s: float  # the compiled update, until its metrics were on the host
    queue_depth: int  # trajectories waiting in the queues after this update took its own
    episodes: EpisodeStats  # the episodes ended, all processes


@dataclasses.dataclass
class Learner:
    """The learner thread: take one trajectory per actor thread, update, publish.

    Between updates it asks every process whether to stop (`stop_requested`, e.g. a
    SIGTERM in any of them), so all processes stop after the same update; `checkpoint`
    is then called with `final=True` (also after the last update), and after every
    other update with `final=False` (it decides whether one is due). `waits` marks the
    update and the stop agreement as waits on the other processes. A single-process run
    also stops before its first update when asked to while it set up or compiled, and
    while waiting for a stuck actor's trajectory (`take_trajectories`), checkpointing the
    updates applied so far.
    """

    update_step: UpdateStep
    state: AgentState  # replicated over the learner mesh; the final state after `run`
    key: PRNGKey  # replicated over the learner mesh
    mesh: Mesh
    queues: list[queue.Queue]  # one per actor thread of this process, in thread order
    sources: list[ParamSource]  # one per actor device of this process
    num_updates: int
    report: Callable[[UpdateRecord], None]
    first_update: int = 0  # updates applied before this run (resume)
    stop_requested: Callable[[], bool] = lambda: False
    checkpoint: Callable[["Learner", int, bool], None] = lambda learner, update, final: None
    describe_kept: Callable[[], str] = lambda: "no checkpoint was written"
    waits: Waits = NO_WAITS
    stopped: bool = False  # set when `stop_requested` ended the run early
    updates: int = 0  # updates applied so far, over every session of the run

    def __post_init__(self) -> None:
        self.updates = self.first_update

    def run(self, stop: threading.Event) -> None:
        split = make_key_split(self.mesh)
        self.publish(self.first_update)
        alone = jax.process_count() == 1
        for update in range(self.first_update, self.num_updates):
            start = time.perf_counter()
            # Alone (no other process to agree with), a stop asked for before this update
            # (while the run set up or compiled) ends the run before it.
            items = None if alone and self.stop_requested() else self.take_trajectories(stop)
            if items is None:
                self.stop_before(update)
                return
            waited = time.perf_counter() - start
            key, step_keys = split(self.key)
            trajectories = tuple(item.trajectory for item in items)
            if update == self.first_update:
                compile_ahead(self.update_step, self.state, trajectories, step_keys)
                if alone and self.stop_requested():  # asked while compiling (minutes, for a CNN)
                    self.stop_before(update)
                    return
            with self.waits.waiting(f"update {update + 1}"):
                state, metrics = self.update_step(self.state, trajectories, step_keys)
                metrics, finite = jax.device_get((metrics, all_finite(state.params)))
            updated = time.perf_counter()
            check_finite(metrics, bool(finite), f"at update {update + 1}",
                         "run stopped (the update was not applied)", self.describe_kept())
            self.state, self.key, self.updates = state, key, update + 1
            self.publish(update + 1)
            episodes = sum((item.episodes for item in items), EpisodeStats.host_zeros())
            with self.waits.waiting(f"the stop agreement after update {update + 1}"):
                shared = process_sum(np.append(episodes.to_array(), float(self.stop_requested())), self.mesh)
            self.report(UpdateRecord(
                update + 1, metrics, items, [update - item.version for item in items],
                waited, updated - start - waited, sum(q.qsize() for q in self.queues), EpisodeStats.from_array(shared),
            ))
            self.stopped = bool(shared[3] > 0) and update + 1 < self.num_updates
            self.checkpoint(self, update + 1, self.stopped or update + 1 == self.num_updates)
            if self.stopped:
                return

    def stop_before(self, update: int) -> None:
        """End a stopped run before update `update + 1`: checkpoint the `update` applied."""
        self.stopped = True
        self.checkpoint(self, update, True)

    def take_trajectories(self, stop: threading.Event) -> list[RolloutItem] | None:
        """One trajectory from each actor thread's queue. A single-process run (no other
        process to agree with) also watches `stop_requested` while it waits: an actor that
        delivers nothing within `STUCK_S` of a stop request (stuck in its environment) cannot
        hold off a SIGTERM; None then. Healthy actors deliver well within that grace."""
        alone = jax.process_count() == 1
        items = []
        for q in self.queues:
            deadline = None
            while True:
                try:
                    items.append(get(q, stop, timeout_s=STOP_POLL_S)[0])
                    break
                except queue.Empty:
                    if alone and self.stop_requested():
                        deadline = deadline or time.monotonic() + STUCK_S
                        if time.monotonic() > deadline:
                            return None
        return items

    def publish(self, version: int) -> None:
        params = local_copy(self.state.params)  # the mesh may span other processes' devices
        for source in self.sources:
            source.publish(params, version)

