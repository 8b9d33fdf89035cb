"""Sebulba on the host: validate, start the actor and learner threads, report metrics.

The main thread only waits: for metrics rows (handed to `on_metrics` as they come), for a
fault in any thread, or for Ctrl-C. Any of those stops every thread; a fault is re-raised
here with the name of the thread it came from.
"""

from __future__ import annotations

import queue
import time
import warnings
from typing import Any, Callable, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding

from podracer import distributed, parallel
from podracer.agents import algorithm_for, make_checked_agent
from podracer.checkpoint import Checkpoints, Progress
from podracer.config import Config, ConfigError, check
from podracer.distributed import NO_WAITS, Waits
from podracer.envs import UnknownEnvError
from podracer.envs.host import host_env_specs
from podracer.runner import Hooks, TrainResult
from podracer.runner.device_state import broadcast_device_axis
from podracer.runner.hooks import MetricsCallback
from podracer.types import ActionSpec, Agent, AgentState, BatchShape, ObservationSpec
from sebulba import autolayout
from sebulba.actor import Actor, make_policy_step
from sebulba.config import SebulbaConfig
from sebulba.layout import Layout, make_layout
from sebulba.layout_choice import LayoutChoice
from sebulba.learner import AXIS, Learner, LearnerState, make_update_step, state_specs, trajectory_sharding
from sebulba.metrics import MetricsReporter
from sebulba.params import ParamSource
from sebulba.threads import ThreadGroup

JOIN_TIMEOUT_S = 20.0
ROWS_WAIT_S = 5.0  # a checkpoint waits at most this long for the sinks to write the rows it counts
_DONE = object()


class Setup(NamedTuple):
    layout: Layout
    obs_spec: ObservationSpec
    action_spec: ActionSpec
    agent: Agent
    mesh: Mesh  # the learner devices, axis `AXIS`


def setup(config: Config, chosen: LayoutChoice | None = None) -> Setup:
    """Everything but compilation and threads: raises ConfigError on bad input first
    (layout, sizes, an agent paired with an action space it does not support, a batch it
    cannot split). With `arch.layout="auto"` it measures this host and chooses the actor
    layout, unless given the layout `chosen` already for the same host and sizes."""
    if not isinstance(config.arch, SebulbaConfig):
        raise ConfigError(f"arch must be a SebulbaConfig for the Sebulba runner, got {type(config.arch).__name__}")
    # A population shares one compiled program only under Anakin: Sebulba's actors step one
    # agent's host environments, so M members would need M actor pools and M learners,
    # each as costly as a run of its own.
    check(not config.population.sweep, "population.sweep", "needs an Anakin preset (a Sebulba run trains one "
          "agent: run each setting separately)", config.population.sweep)
    layout = make_layout(config)
    try:
        obs_spec, action_spec = host_env_specs(config.env)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None
    except ConfigError:  # already names its field
        raise
    except ValueError as error:
        raise ConfigError(f"env.id: {error}") from None
    except ImportError as error:  # e.g. EnvPool's Procgen ids without the Qt libraries
        raise ConfigError(f"env.id: {config.env.id} cannot be loaded here: {error}") from None
    batch = BatchShape(config.arch.rollout_length, config.arch.num_envs // len(layout.learner_devices))
    agent = make_checked_agent(config.agent, obs_spec, action_spec, batch, env_id=config.env.id,
                               num_updates=layout.num_updates, axis_name=AXIS)
    if config.arch.layout == "auto":
        layout = make_layout(config, auto=chosen or choose_for_host(config, layout, agent, obs_spec))
    return Setup(layout, obs_spec, action_spec, agent, parallel.make_mesh(layout.learner_devices, AXIS))


def choose_for_host(config: Config, layout: Layout, agent: Agent, obs_spec: ObservationSpec) -> LayoutChoice:
    """`arch.layout="auto"`: measure this host and choose its actor layout (one process:
    processes measured apart could split the batch differently)."""
    if jax.process_count() > 1:
        raise ConfigError(f"arch.layout: auto measures one host; with {jax.process_count()} processes set "
                          "arch.threads_per_actor_device and arch.env_threads by hand (layout manual), got 'auto'")
    return autolayout.resolve(config, agent, obs_spec, list(layout.actor_devices), len(layout.learner_devices),
                              make_policy_step(agent))


def initial_state(config: Config, s: Setup) -> AgentState:
    """The agent's initial state placed with `learner.state_specs`: replicated over the
    learner devices, but for per-device state (`local`, e.g. a replay buffer), which gets a
    leading device axis `[D, ...]`, every device starting from the same (empty) one.

    Built by one compiled program whose outputs land on their devices directly: no host
    copy of a large buffer, and each process of a multi-process run makes its own shards."""
    num_devices = s.mesh.devices.size

    def init() -> AgentState:
        state = s.agent.init(jax.random.fold_in(jax.random.key(config.seed), 0))
        return state.replace(local=broadcast_device_axis(state.local, num_devices))

    shapes = jax.eval_shape(init)
    shardings = jax.tree.map(lambda _, spec: NamedSharding(s.mesh, spec), shapes, state_specs(shapes))
    return jax.jit(init, out_shardings=shardings)()


def initial_learner_state(config: Config, s: Setup) -> LearnerState:
    """The agent's initial state and the learner's key, on the learner devices: what a
    checkpoint holds, so also the target that restoring one is shaped and placed like."""
    key = parallel.replicate(jax.random.fold_in(jax.random.key(config.seed), 1), s.mesh)
    return LearnerState(initial_state(config, s), key)


def train(
    config: Config,
    on_metrics: MetricsCallback | None = None,
    *,
    checkpointer: Checkpoints | None = None,
    should_stop: Callable[[], bool] | None = None,
    resume: bool = False,
    waits: Waits = NO_WAITS,
    prepared: Setup | None = None,
) -> TrainResult:
    """Train `config.agent` on the host environment `config.env` with Sebulba
    (`TrainResult.state` is the learner's `AgentState`, placed with `learner.state_specs`).

    `on_metrics` receives each metrics row (see `sebulba.metrics`) in the calling thread as
    soon as it exists. Ctrl-C or a fault in any thread stops every thread and re-raises.
    When `should_stop()` turns true (in any process) the learner stops after its current
    update, checkpoints and the run returns with `stopped=True`. With a `checkpointer`
    the learner state (parameters, optimizer state, replay buffers, its key, counters) is
    saved every `config.checkpoint.every_updates`, on stopping and at the end;
    `resume=True` continues from its latest checkpoint. The environments restart on
    resume: EnvPool's states cannot be saved, so a resumed Sebulba run continues the same
    learner but not bit for bit the same run (Anakin's resume is exact). `waits` marks
    the learner's waits on other processes (a multi-process run's deadlines); see
    `podracer.runner.Hooks`. `prepared` is `setup(config)` when the caller has already
    run it (`experiments.train` does, on every process, before anything else).
    """
    hooks = Hooks(on_metrics, checkpointer, should_stop, resume, waits)
    s = prepared if prepared is not None else setup(config)
    with waits.waiting("every process to connect its learner devices"):
        distributed.connect(s.mesh, config.distributed.timeout_s)
    start, progress = hooks.start(initial_learner_state(config, s), config.checkpoint.init_from,
                                  init_member=config.checkpoint.init_member)
    rows, learner = run(config, s, start, hooks, progress)
    return TrainResult(rows, learner.state, s.agent, stopped=learner.stopped,
                       env_steps=learner.updates * s.layout.steps_per_update)


def actor_seed(seed: int, thread: int, first_update: int = 0) -> int:
    """The environments' seed of actor thread `thread` (numbered over all processes); a
    resumed run (`first_update` > 0) gets fresh episodes."""
    return (seed * 1_000_003 + 7_919 * (thread + 1) + 104_729 * first_update) % 2**31


def make_actors(config: Config, s: Setup, sources: dict[Any, ParamSource], num_rollouts: int | None,
                max_policy_lag: int, first_update: int = 0) -> list[Actor]:
    arch: SebulbaConfig = config.arch
    policy_step = make_policy_step(s.agent)
    sharding = trajectory_sharding(s.mesh)
    first_thread = jax.process_index() * s.layout.num_actor_threads
    return [
        Actor(
            index=k, env_config=config.env, num_envs=s.layout.envs_per_thread,
            seed=actor_seed(config.seed, first_thread + k, first_update), env_threads=s.layout.env_threads,
            rollout_length=arch.rollout_length, max_policy_lag=max_policy_lag,
            policy_step=policy_step, params=sources[s.layout.actor_device_of(k)], agent=s.agent,
            out=queue.Queue(arch.queue_size), sharding=sharding, num_rollouts=num_rollouts,
            first_version=first_update,
        )
        for k in range(s.layout.num_actor_threads)
    ]


def param_sources(layout: Layout) -> dict[Any, ParamSource]:
    return {device: ParamSource(device) for device in layout.actor_devices}


def run(
    config: Config, s: Setup, start: LearnerState, hooks: Hooks, progress: Progress = Progress(),
) -> tuple[list[dict[str, Any]], Learner]:
    """Run from `start` (after `progress.updates` updates) to the last update, or until
    `hooks.stop_requested()` (e.g. a benchmark's deadline): `(rows, the learner)`, whose
    `state` is the final agent state. `hooks.resume` is not read: `start` is where to go on."""
    rows_queue: queue.Queue = queue.Queue()
    sources = param_sources(s.layout)
    first, total = progress.updates, s.layout.num_updates
    actors = make_actors(config, s, sources, max(total - first, 0), config.arch.max_policy_lag, first)
    reporter = MetricsReporter(s.layout.steps_per_update, config.arch.updates_per_log, total, rows_queue.put,
                               first_update=first, wall_offset_s=progress.wall_s,
                               step_metrics=algorithm_for(config.agent).step_metrics)
    every = config.checkpoint.every_updates

    def checkpoint(learner: Learner, update: int, final: bool) -> None:
        saving = hooks.checkpointer is not None and (final or (every > 0 and update % every == 0))
        if final or saving:  # updates since the last row get one before a checkpoint covers them:
            reporter.flush()  # a resume from it starts logging after them
        if not saving:
            return
        rows_written(rows_queue, ROWS_WAIT_S)  # the checkpoint counts them as written
        hooks.save(LearnerState(learner.state, learner.key), Progress(
            update, update * s.layout.steps_per_update, reporter.clock.wall_s(), progress.rows + reporter.rows))

    learner = Learner(
        update_step=make_update_step(s.agent, s.mesh), state=start.agent, key=start.key, mesh=s.mesh,
        queues=[actor.out for actor in actors], sources=list(sources.values()),
        num_updates=total, report=reporter, first_update=first,
        stop_requested=hooks.stop_requested, checkpoint=checkpoint,
        describe_kept=hooks.describe_kept, waits=hooks.waits,
    )
    group = ThreadGroup()
    for actor in actors:
        group.start(f"actor-{actor.index}", actor.run, group.stop)
    group.start("learner", _learner_body, learner, rows_queue, group.stop)
    return supervise(group, rows_queue, hooks.emit, lambda: learner.stopped), learner


def _learner_body(learner: Learner, rows_queue: queue.Queue, stop: Any) -> None:
    learner.run(stop)
    rows_queue.put(_DONE)


def rows_written(rows_queue: queue.Queue, timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until the main thread has handed every queued row to the
    sinks (`supervise` marks each one done): a checkpoint counts its rows as written, and a
    resume cuts metrics.jsonl back to that count, so a process killed just after the save
    (a preemption) must not leave rows the checkpoint counts unwritten. False on timeout."""
    deadline = time.monotonic() + timeout_s
    with rows_queue.all_tasks_done:
        while rows_queue.unfinished_tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            rows_queue.all_tasks_done.wait(remaining)
    return True


def supervise(group: ThreadGroup, rows_queue: queue.Queue, on_metrics: MetricsCallback,
              stopped: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
    """Hand rows to `on_metrics` until the learner is done, a thread fails or the caller is
    interrupted; then stop and join every thread. A thread that does not stop (an actor
    stuck inside its environment) is an error, unless the run was `stopped` on request with
    its checkpoint saved: then a warning, and the (daemon) thread is left behind."""
    rows: list[dict[str, Any]] = []
    try:
        while group.error is None:
            try:
                row = rows_queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if row is _DONE:
                rows_queue.task_done()
                break
            rows.append(row)
            on_metrics(row)
            rows_queue.task_done()
    finally:
        stuck = group.join(JOIN_TIMEOUT_S)
    group.raise_error()
    if stuck and stopped():
        warnings.warn(f"Sebulba threads still running {JOIN_TIMEOUT_S:.0f} s after the run stopped (checkpoint "
                      f"saved): {', '.join(stuck)}; stuck in an environment step?", RuntimeWarning, stacklevel=2)
    elif stuck:
        raise RuntimeError(f"Sebulba threads did not stop within {JOIN_TIMEOUT_S} s: {', '.join(stuck)}")
    return rows
