"""Anakin on the host: validate, build the program, call it, report metrics."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from anakin.config import AnakinConfig
from anakin.program import (
    AXIS,
    CallMetrics,
    MemberAgent,
    RunnerState,
    checkpointed,
    from_checkpointed,
    init_state,
    make_train_call,
)
from anakin.rollout import reset_envs, rollout
from podracer import distributed, parallel
from podracer.agents import algorithm_for, is_builtin, make_agent, make_checked_agent
from podracer.checkpoint import Checkpoints, Progress
from podracer.config import Config, ConfigError, check
from podracer.distributed import NO_WAITS, Waits
from podracer.envs import JaxEnv, UnknownEnvError, make_configured_jax_env
from podracer.pbt import Exploit, exploit_and_explore, is_step
from podracer.population import Population, make_population, member_config, trace_check
from podracer.runner import Clock, Hooks, TrainResult, agent_means, all_finite, check_finite, metrics_row
from podracer.runner.hooks import MetricsCallback
from podracer.runner.sizes import update_sizes
from podracer.types import Agent, BatchShape


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Sizes derived from a config and the devices (never written back into the config)."""

    num_devices: int
    envs_per_device: int
    steps_per_update: int  # env steps of one seed per update: num_envs * rollout_length
    num_updates: int  # per seed, for the whole run


class Setup(NamedTuple):
    env: JaxEnv
    env_params: Any
    agent: Agent
    mesh: jax.sharding.Mesh
    sizes: Sizes
    population: Population | None = None  # swept hyperparameters (None: seeds only)
    member_agent: MemberAgent | None = None  # a population member's agent from its traced hyperparameters


class Completion:
    """When a host call's results became ready, as seen by a thread that waits for them.

    The host thread may be busy elsewhere at that moment: dispatching the next call
    (which, with several processes on CPUs, runs it before returning), saving a
    checkpoint, agreeing on a stop. A row timed when the host gets round to it could
    claim the steps of a call that finished long before; timed here, each row's interval
    runs from one call's end to the next's, at least the time the devices spent on it.
    """

    def __init__(self, outputs: Any):
        self._time = 0.0
        self._thread = threading.Thread(target=self._wait, args=(outputs,), name="anakin-completion", daemon=True)
        self._thread.start()

    def _wait(self, outputs: Any) -> None:
        try:
            jax.block_until_ready(outputs)
        except Exception:  # noqa: BLE001 - the host thread reads the outputs and raises the error
            pass
        self._time = time.perf_counter()

    def time(self) -> float:
        """`time.perf_counter()` when the outputs were ready (waits for them)."""
        self._thread.join()
        return self._time

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the outputs to be ready."""
        self._thread.join(timeout)


class _Call(NamedTuple):
    """A dispatched host call whose metrics have not been read yet."""

    first_update: int  # 1-based
    num_updates: int
    metrics: CallMetrics
    finite: jax.Array  # bool [S]: parameters after the call are finite
    checkpoint_after: bool
    completion: Completion
    hypers: dict[str, np.ndarray]  # the population's hyperparameters during the call (host copies)
    exploit_after: bool = False  # a PBT step follows the call (podracer.pbt)

    @property
    def label(self) -> str:
        return updates_label(self.first_update, self.num_updates)


def updates_label(first_update: int, num_updates: int) -> str:
    """A host call as a wait on the other processes (its collectives), named alike in every
    process: "update 5", "updates 5-8"."""
    last = first_update + num_updates - 1
    return f"update {last}" if num_updates == 1 else f"updates {first_update}-{last}"


def select_devices(indices: tuple[int, ...]) -> list[jax.Device]:
    """The mesh's devices: the chosen local ones, or all devices of all processes."""
    if jax.process_count() > 1:
        check(not indices, "arch.devices", "must be empty with several processes (all devices are used)", indices)
        return jax.devices()
    devices = jax.local_devices()
    for index in indices:
        check(index < len(devices), "arch.devices", f"names device {index} but only {len(devices)} exist", indices)
    return [devices[i] for i in indices] if indices else devices


def compute_sizes(config: Config, num_devices: int) -> Sizes:
    arch: AnakinConfig = config.arch
    check(arch.num_envs % num_devices == 0, "arch.num_envs",
          f"must be divisible by the number of devices ({num_devices})", arch.num_envs)
    steps_per_update, num_updates = update_sizes(config)
    return Sizes(num_devices, arch.num_envs // num_devices, steps_per_update, num_updates)


def setup(config: Config) -> Setup:
    """Everything but compilation: raises ConfigError on bad input (sizes, an agent paired
    with an action space it does not support, a batch it cannot split), before any compile."""
    if not isinstance(config.arch, AnakinConfig):
        raise ConfigError(f"arch must be an AnakinConfig for the Anakin runner, got {type(config.arch).__name__}")
    if config.env.backend not in ("auto", "jax"):
        raise ConfigError(f"env.backend {config.env.backend!r} chooses Sebulba's host environments; an Anakin run "
                          "steps JAX environments (backend 'auto' or 'jax')")
    try:
        env = make_configured_jax_env(config.env)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None
    devices = select_devices(config.arch.devices)
    sizes = compute_sizes(config, len(devices))
    env_params = env.default_params
    obs_spec, action_spec = env.observation_spec(env_params), env.action_spec(env_params)
    batch = BatchShape(config.arch.rollout_length, sizes.envs_per_device)
    population = make_population(config)
    agent = make_checked_agent(config.agent, obs_spec, action_spec, batch, env_id=config.env.id,
                               num_updates=sizes.num_updates, axis_name=AXIS)
    member_agent = None
    if population is not None:
        algorithm = algorithm_for(config.agent)
        for m in range(0, population.size, population.num_seeds):  # each setting's batch split
            algorithm.check_batch(member_config(config.agent, population.hypers(m)), batch)

        def member_agent(hypers: dict[str, jax.Array], axis_name: Any = AXIS) -> Agent:
            return make_agent(member_config(config.agent, hypers), obs_spec, action_spec,
                              num_updates=sizes.num_updates, axis_name=axis_name, env_id=config.env.id)

        check_population_traces(config, env, env_params, population, member_agent, sizes.envs_per_device)
    return Setup(env, env_params, agent, parallel.make_mesh(devices, AXIS), sizes, population, member_agent)


def check_population_traces(config: Config, env: JaxEnv, env_params: Any, population: Population,
                            member_agent: Callable[..., Agent], envs_per_device: int) -> None:
    """ConfigError naming a swept field that cannot be a traced value (it sets a shape or a
    Python branch of the agent): one member's init, rollout and update are traced (nothing
    runs or compiles) on one device's batch, without the device axis."""

    def one_iteration(hypers: dict[str, Any], key: jax.Array) -> Any:
        agent = member_agent(hypers, None)
        state = agent.init(key)
        envs = reset_envs(env, env_params, key, envs_per_device, agent)
        _, traj, _ = rollout(env, env_params, agent, state.params, envs, key, config.arch.rollout_length)
        return agent.update(state, traj, key)

    trace_check(one_iteration, population.initial_arrays(), jax.random.key(0))


def population_size(config: Config, s: Setup) -> int:
    """Members of the run: the population's, or `arch.num_seeds` without a sweep."""
    return s.population.size if s.population is not None else config.arch.num_seeds


def initial_state(config: Config, s: Setup) -> RunnerState:
    hypers = s.population.initial_arrays() if s.population is not None else None
    return init_state(s.env, s.env_params, s.agent, s.mesh, jax.random.key(config.seed),
                      config.arch.num_seeds, config.arch.num_envs, hypers, s.member_agent)


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
    """Train `config.agent` on `config.env` with Anakin; returns metrics and final state
    (`TrainResult.state` is the `RunnerState`, every leaf with a leading seed axis).

    `on_metrics` receives each metrics row as soon as it exists (the command-line tool
    writes them to disk and the console); a notebook can just read `result.metrics`.
    With a `checkpointer`, the state is saved every `config.checkpoint.every_updates`, when
    `should_stop()` turns true (checked between host calls; the run then returns with
    `stopped=True`) and at the end; `resume=True` continues from its latest checkpoint,
    exactly (see `podracer.runner.Hooks`). A non-finite loss or parameter raises
    `NonFiniteError` before it is saved. `waits` marks every wait on other processes (a
    multi-process run's deadlines). `prepared` is `setup(config)` when the caller has
    already run it (`experiments.train` does, on every process, before anything else).
    """
    hooks = Hooks(on_metrics, checkpointer, should_stop, resume, waits)
    s = prepared if prepared is not None else setup(config)
    with waits.waiting("every process to connect its devices"):
        distributed.connect(s.mesh, config.distributed.timeout_s)
    state, progress = hooks.start(checkpointed(initial_state(config, s)), config.checkpoint.init_from,
                                  seed_axis=True, init_member=config.checkpoint.init_member)
    state = from_checkpointed(state)
    if progress.updates >= s.sizes.num_updates:  # a finished run resumed: nothing to compile or run
        return TrainResult([], state, s.agent, env_steps=progress.env_steps)
    algorithm = algorithm_for(config.agent)
    step_metrics = algorithm.step_metrics
    train_call = make_train_call(s.env, s.env_params, s.agent, s.mesh, config.arch.rollout_length,
                                 step_metrics, check_typing=not is_builtin(algorithm), member_agent=s.member_agent)
    # Compiled here, so that no wait on the other processes (a dispatch) includes compiling.
    train_call = train_call.lower(state, jnp.int32(config.arch.updates_per_call)).compile()
    # The hyperparameters pass through a call unchanged: the host's copy is theirs.
    hypers = {name: np.asarray(values) for name, values in jax.device_get(state.hypers).items()}
    total, every = s.sizes.num_updates, config.checkpoint.every_updates
    rows: list[dict[str, Any]] = []
    clock = Clock(progress.wall_s)
    dispatched = progress.updates
    pending: _Call | None = None
    # Dispatch call k+1 before reading the metrics of call k, so the devices never idle
    # while the host formats and writes a row. The pipeline drains before a checkpoint
    # (the state after call k is donated to call k+1) and before stopping.
    while True:
        # Every process must stop after the same call: a stop in one is a stop in all.
        stop = pending is not None and _agree_to_stop(hooks.stop_requested(), pending, s.mesh, waits)
        launched = None
        held = pending is not None and (pending.checkpoint_after or pending.exploit_after)
        if dispatched < total and not (stop or held):
            n = min(config.arch.updates_per_call, total - dispatched)
            crosses = every > 0 and dispatched // every < (dispatched + n) // every
            state, launched = _dispatch(train_call, state, dispatched + 1, n, crosses, waits, hypers)
            exploit = is_step(dispatched, dispatched + n, config.population.pbt_every) and dispatched + n < total
            launched = launched._replace(exploit_after=exploit)
            dispatched += n
        if pending is not None:
            try:
                with waits.waiting(pending.label):
                    progress, row = _finish(pending, progress, s.sizes, population_size(config, s), clock,
                                            hooks, step_metrics, s.population)
                if pending.exploit_after:  # the devices are idle: nothing was dispatched after `pending`
                    step = exploit_and_explore(s.population, config.population,
                                               [m["episode_return"] for m in row["members"]], hypers,
                                               progress.updates, config.seed)
                    state, hypers = _exploit(state, step), step.hypers
                    row["pbt"] = {"env_steps": progress.env_steps, **step.event}
                rows.append(row)
                hooks.emit(row)
            except BaseException:
                if launched is not None:
                    # The next call is in flight: let it end before the error does (an
                    # interpreter that exits while a thread waits on a running XLA program
                    # aborts, SIGABRT, instead of reporting the error); bounded, in case
                    # another process is gone and its collectives never complete.
                    launched.completion.join(config.distributed.timeout_s)
                raise
            if launched is None and (pending.checkpoint_after or stop or dispatched >= total
                                     or not pending.exploit_after):
                hooks.save(checkpointed(state), progress)  # the state right after `pending` (and its PBT step)
            if stop:  # a stop requested during the last call ends a finished run
                return TrainResult(rows, state, s.agent, stopped=progress.updates < total, env_steps=progress.env_steps)
        if launched is None and dispatched >= total:
            return TrainResult(rows, state, s.agent, env_steps=progress.env_steps)
        pending = launched


def _exploit(state: RunnerState, step: Exploit) -> RunnerState:
    """`state` after a PBT step: member `m`'s agent state is `step.sources[m]`'s (a gather
    along the member axis, placed as before), its hyperparameters `step.hypers`."""
    sources = jnp.asarray(step.sources)
    agent = jax.tree.map(lambda x: jax.device_put(x[sources], x.sharding), state.agent)
    hypers = {name: jax.device_put(jnp.asarray(step.hypers[name]), value.sharding)
              for name, value in state.hypers.items()}
    return state._replace(agent=agent, hypers=hypers)


def _dispatch(train_call: Any, state: RunnerState, first_update: int, n: int, checkpoint_after: bool,
              waits: Waits, hypers: dict[str, np.ndarray]) -> tuple[RunnerState, _Call]:
    """Start a host call of `n` updates. With several processes a dispatch may run the
    call before it returns, so it is a wait on the other processes too."""
    with waits.waiting(updates_label(first_update, n)):
        state, metrics = train_call(state, jnp.int32(n))
        finite_after = all_finite(state.agent.params, batch_dims=1)
    return state, _Call(first_update, n, metrics, finite_after, checkpoint_after, Completion(metrics), hypers)


def _agree_to_stop(stop_here: bool, after: _Call, mesh: jax.sharding.Mesh, waits: Waits) -> bool:
    """Whether any process asks to stop after the call `after` (a collective)."""
    last = after.first_update + after.num_updates - 1
    with waits.waiting(f"the stop agreement after update {last}"):
        if parallel.spans_processes(mesh):
            # Not while `after` still runs: XLA runs independent programs side by side, and
            # the collectives of two programs in flight at once pair up differently in
            # different processes (wrong sums, or orbax's barrier against a gradient).
            jax.block_until_ready(after.metrics)
        return bool(parallel.process_sum(np.float32(stop_here), mesh) > 0)


def members_row(population: Population, hypers: dict[str, np.ndarray],
                per_member_return: list[float | None]) -> list[dict[str, Any]]:
    """A population's `members` entry of a metrics row: each member's index, setting, seed,
    hyperparameters during the row and mean episode return (None if no episode ended)."""
    return [{"member": m, "setting": population.setting_of(m), "seed": population.seed_of(m),
             "hypers": {name: _shortest(values[m]) for name, values in hypers.items()},
             "episode_return": per_member_return[m]} for m in range(population.size)]


def _shortest(value: np.ndarray) -> float | int:
    """A float32 or int32 hyperparameter as the shortest Python number that rounds to it
    (`0.001`, not `0.0010000000474974513`)."""
    if np.issubdtype(value.dtype, np.integer):
        return int(value)
    return float(np.format_float_positional(value, unique=True, trim="-"))


def _finish(
    call: _Call, progress: Progress, sizes: Sizes, num_seeds: int, clock: Clock, hooks: Hooks,
    step_metrics: tuple[str, ...] = (), population: Population | None = None,
) -> tuple[Progress, dict[str, Any]]:
    """Read a call's metrics, refuse non-finite results, and build its metrics row.
    `env_steps` counts one seed's experience; `sps` all seeds'; `step_metrics` are averaged
    over the call's gradient steps (`podracer.runner.agent_means`)."""
    metrics, finite = jax.device_get((call.metrics, call.finite))
    check_finite(metrics.agent, finite, f"in {call.label}", "run stopped", hooks.describe_kept())
    interval, wall_s = clock.lap(call.completion.time())
    updates = call.first_update - 1 + call.num_updates
    env_steps = updates * sizes.steps_per_update
    sps = call.num_updates * sizes.steps_per_update * num_seeds / interval
    agent = agent_means(metrics.agent, call.num_updates, step_metrics, metrics.agent_by_step)
    row = metrics_row(env_steps, sps, wall_s, metrics.episodes, agent)
    if population is not None:
        row["members"] = members_row(population, call.hypers,
                                     row.get("episode_return_per_seed", [row["episode_return"]]))
    return Progress(updates, env_steps, wall_s, progress.rows + 1), row
