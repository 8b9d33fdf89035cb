"""Sebulba on the host: validate, start the actor and learner threads, report metrics.

The main thread only waits: for metrics rows (handed to `on_metrics` as they come), for a
fault in any thread, or for Ctrl-C. Any of those stops every thread; a fault is re-raised
here with the name of the thread it came from.
"""

from __future__ import annotations

import queue
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from podracer import parallel
from podracer.agents import make_agent
from podracer.config import Config, ConfigError
from podracer.envs import UnknownEnvError
from podracer.envs.host import host_env_specs
from podracer.types import Agent, AgentState, DiscreteSpec, ObsSpec
from sebulba.actor import Actor, make_policy_step
from sebulba.config import SebulbaConfig
from sebulba.layout import Layout, make_layout
from sebulba.learner import AXIS, Learner, make_update_step, state_specs, trajectory_sharding
from sebulba.metrics import MetricsReporter
from sebulba.params import ParamSource
from sebulba.threads import ThreadGroup

MetricsCallback = Callable[[dict[str, Any]], None]
JOIN_TIMEOUT_S = 20.0
_DONE = object()


class Setup(NamedTuple):
    layout: Layout
    obs_spec: ObsSpec
    action_spec: DiscreteSpec
    agent: Agent
    mesh: Mesh  # the learner devices, axis `AXIS`


class TrainResult(NamedTuple):
    metrics: list[dict[str, Any]]  # one row per `arch.updates_per_log` updates
    state: AgentState  # final learner state, placed with `learner.state_specs`
    agent: Agent
    run_dir: str | None = None  # set by `experiments.train`
    stopped: bool = False  # True when `should_stop` ended the run early


def setup(config: Config) -> Setup:
    """Everything but compilation and threads: raises ConfigError on bad input first."""
    if not isinstance(config.arch, SebulbaConfig):
        raise ConfigError(f"arch must be a SebulbaConfig for the Sebulba runner, got {type(config.arch).__name__}")
    layout = make_layout(config)
    try:
        obs_spec, action_spec = host_env_specs(config.env)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None
    except ValueError as error:
        raise ConfigError(f"env.id: {error}") from None
    agent = make_agent(config.agent, obs_spec, action_spec, num_updates=layout.num_updates, axis_name=AXIS)
    return Setup(layout, obs_spec, action_spec, agent, parallel.make_mesh(layout.learner_devices, AXIS))


def initial_state(config: Config, s: Setup) -> AgentState:
    """The agent's initial state placed with `learner.state_specs`: replicated over the
    learner devices, but for per-device state (`local`, e.g. a replay buffer), which gets a
    leading device axis `[D, ...]`, every device starting from the same (empty) one.

    Built by one compiled program whose outputs land on their devices directly: no host
    copy of a large buffer, and each process of a multi-process run makes its own shards."""
    num_devices = s.mesh.devices.size

    def init() -> AgentState:
        state = s.agent.init(jax.random.fold_in(jax.random.key(config.seed), 0))
        return state.replace(local=jax.tree.map(lambda x: jnp.broadcast_to(x, (num_devices,) + x.shape), state.local))

    shapes = jax.eval_shape(init)
    shardings = jax.tree.map(lambda _, spec: NamedSharding(s.mesh, spec), shapes, state_specs(shapes))
    return jax.jit(init, out_shardings=shardings)()


def train(
    config: Config,
    on_metrics: MetricsCallback | None = None,
    *,
    checkpointer: Any = None,
    should_stop: Callable[[], bool] | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train `config.agent` on the host environment `config.env` with Sebulba.

    `on_metrics` receives each metrics row (see `sebulba.metrics`) in the calling thread as
    soon as it exists. Ctrl-C or a fault in any thread stops every thread and re-raises;
    `should_stop()` (polled by the main thread) ends the run early with `stopped=True`.
    Checkpoints and resume are not implemented for Sebulba yet: `resume=True` is an error
    and `checkpointer` is unused.
    """
    del checkpointer
    if resume:
        raise ConfigError("resume: Sebulba runs cannot be resumed yet (only Anakin runs checkpoint)")
    s = setup(config)
    stop_requested = [False]

    def stop_early() -> bool:
        stop_requested[0] = stop_requested[0] or (should_stop is not None and should_stop())
        return stop_requested[0]

    rows, state = run(config, s, initial_state(config, s), on_metrics, stop_early)
    return TrainResult(rows, state, s.agent, stopped=stop_requested[0])


def actor_seed(seed: int, thread: int) -> int:
    return (seed * 1_000_003 + 7_919 * (thread + 1)) % 2**31


def make_actors(config: Config, s: Setup, sources: dict[Any, ParamSource], num_rollouts: int | None,
                max_policy_lag: int) -> list[Actor]:
    arch: SebulbaConfig = config.arch
    policy_step = make_policy_step(s.agent.act)
    sharding = trajectory_sharding(s.mesh)
    return [
        Actor(
            index=k, env_config=config.env, num_envs=s.layout.envs_per_thread,
            seed=actor_seed(config.seed, k), env_threads=arch.env_threads,
            rollout_length=arch.rollout_length, max_policy_lag=max_policy_lag,
            policy_step=policy_step, params=sources[s.layout.actor_device_of(k)],
            out=queue.Queue(arch.queue_size), sharding=sharding, num_rollouts=num_rollouts,
        )
        for k in range(s.layout.num_actor_threads)
    ]


def param_sources(layout: Layout) -> dict[Any, ParamSource]:
    return {device: ParamSource(device) for device in layout.actor_devices}


def run(
    config: Config, s: Setup, state: AgentState, on_metrics: MetricsCallback | None,
    stop_early: Callable[[], bool] | None = None,
) -> tuple[list[dict[str, Any]], AgentState]:
    """Run every update (or until `stop_early()` is true, e.g. a benchmark's deadline):
    `(rows, final agent state)`."""
    rows_queue: queue.Queue = queue.Queue()
    sources = param_sources(s.layout)
    actors = make_actors(config, s, sources, s.layout.num_updates, config.arch.max_policy_lag)
    reporter = MetricsReporter(s.layout.steps_per_update, config.arch.updates_per_log,
                               s.layout.num_updates, rows_queue.put)
    learner = Learner(
        update_step=make_update_step(s.agent, s.mesh), state=state,
        key=jax.random.fold_in(jax.random.key(config.seed), 1), mesh=s.mesh,
        queues=[actor.out for actor in actors], sources=list(sources.values()),
        num_updates=s.layout.num_updates, report=reporter,
    )
    group = ThreadGroup()
    for actor in actors:
        group.start(f"actor-{actor.index}", actor.run, group.stop)
    group.start("learner", _learner_body, learner, rows_queue, group.stop)
    rows = supervise(group, rows_queue, on_metrics, stop_early)
    return rows, learner.state


def _learner_body(learner: Learner, rows_queue: queue.Queue, stop: Any) -> None:
    learner.run(stop)
    rows_queue.put(_DONE)


def supervise(
    group: ThreadGroup, rows_queue: queue.Queue, on_metrics: MetricsCallback | None,
    stop_early: Callable[[], bool] | None = None,
) -> list[dict[str, Any]]:
    """Hand rows to `on_metrics` until the learner is done, a thread fails, `stop_early()`
    or the caller is interrupted; then stop and join every thread."""
    rows: list[dict[str, Any]] = []
    try:
        while group.error is None and not (stop_early is not None and stop_early()):
            try:
                row = rows_queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if row is _DONE:
                break
            rows.append(row)
            if on_metrics is not None:
                on_metrics(row)
    finally:
        stuck = group.join(JOIN_TIMEOUT_S)
    group.raise_error()
    if stuck:
        raise RuntimeError(f"Sebulba threads did not stop within {JOIN_TIMEOUT_S} s: {', '.join(stuck)}")
    return rows
