"""The actor layout chosen for this host (`arch.layout="auto"`).

Two halves. `measure` times, on this host, the environment alone (one EnvPool batch of
each candidate size, with each candidate number of EnvPool threads) and the policy alone
(one actor device, the same batch sizes). `choose_layout` is a pure function of those rates,
the core count and the budgets: it predicts the actors' env steps/s for every candidate
and keeps the best, so it can be tested with made-up rates.

`arch.num_envs` (the update's batch) is the user's and stays fixed: the layout only decides
how it is split into actor threads, and how many EnvPool threads step each thread's batch.
What is learned is the same whichever layout runs.

The prediction, per candidate (`T` threads per actor device, `D` actor devices, `b` envs per
thread, `E` EnvPool threads per thread):

- one actor thread alternates inference and an env step: `1 / (1/inf(b) + 1/env(b, E))`
  batches' worth of env steps per second, times `D * T` threads;
- one device runs one inference at a time: at most `D * inf(b)`;
- the environments cannot use more cores than the host has: at most
  `D * T * env(b, E) * min(1, cores / (D * T * E))`;
- on a CPU actor device the policy runs on the same cores as the environments, so those
  two caps add up as times (`1 / (1/inference + 1/environments)`) instead of overlapping.

With two or more threads per actor device one thread's inference overlaps another's env
step (the Sebulba paper's two env batches per actor core).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from podracer.config import Config, ConfigError
from podracer.envs.host import make_host_env
from podracer.types import Agent, ObservationSpec, obs_spec_map
from sebulba.actor import initial_acting_state
from sebulba.threads import ThreadGroup

COMPILE_TIMEOUT_S = 600.0  # a trial waits at most this long for every thread's first step
MEASURE_S = 0.6  # seconds each rate is timed (over every round), after a warm-up step
ROUNDS = 3  # rounds over the candidates; each rate keeps its best round
TIE = 0.05  # candidates within this fraction of the best prediction count as equal
TRIALS = 2  # best predicted layouts tried whole (with the config's own) before choosing
TRIAL_S = 1.0  # seconds each layout is tried in all, after every thread has stepped once
KEEP_OWN = 0.10  # the config's own layout, tried, stays unless another tried is this much faster
TRIAL_ROUNDS = 2  # rounds over the layouts tried; each keeps its best round
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Budgets:
    """What a layout may cost.

    memory_bytes: host memory for trajectories in flight (each actor thread's queue, the
                  one it is building and the one the learner reads).
    max_rollout_s: the policy-lag budget: seconds one rollout may take, i.e. how long an actor
                  acts with the same parameters before it asks for newer ones.
    """

    memory_bytes: int = 16 * GIB
    max_rollout_s: float = 30.0


@dataclasses.dataclass(frozen=True)
class Measurements:
    """Rates measured on this host, env steps per second.

    env_rate:       `(envs in the batch, EnvPool threads) -> rate` of one host env batch
                    stepped alone by one thread (the same action every step).
    inference_rate: `envs in the batch -> rate` of the policy alone on one actor device.
    cores:          host cores this process may use.
    shared_cores:   True when the actor device is the host's CPU (inference takes the cores
                    the environments need).
    trial_rate:     `(threads per actor device, EnvPool threads) -> rate` of the whole
                    layout tried (every thread stepping its envs and acting), for the
                    candidates that were: what the prediction misses (the threads' contention
                    for the GIL and the cores) is in it.
    """

    env_rate: dict[tuple[int, int], float]
    inference_rate: dict[int, float]
    cores: int
    shared_cores: bool
    trial_rate: dict[tuple[int, int], float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Candidate:
    threads_per_actor_device: int
    envs_per_thread: int
    env_threads: int
    predicted_sps: float
    env_sps: float  # the environments' cap with this many threads and cores
    inference_sps: float  # the actor devices' inference cap at this batch
    rollout_s: float  # seconds per rollout of one thread
    memory_bytes: int  # trajectories in flight
    within_budgets: bool
    tried: bool = False  # predicted_sps is the rate of a trial of the whole layout


@dataclasses.dataclass(frozen=True)
class LayoutChoice:
    """The chosen split of `arch.num_envs`, why, and every candidate considered."""

    threads_per_actor_device: int
    envs_per_thread: int
    env_threads: int
    predicted_sps: float
    bound: str  # "environments" or "inference": the cap the prediction is closest to
    reason: str  # one paragraph for the console
    candidates: tuple[Candidate, ...]
    measurements: Measurements

    def to_dict(self) -> dict[str, Any]:
        """What `layout.json` holds (JSON types only)."""
        m = self.measurements
        return {
            "threads_per_actor_device": self.threads_per_actor_device,
            "envs_per_thread": self.envs_per_thread,
            "env_threads": self.env_threads,
            "predicted_sps": round(self.predicted_sps, 1),
            "bound": self.bound,
            "reason": self.reason,
            "cores": m.cores,
            "shared_cores": m.shared_cores,
            "env_rate": [{"envs": b, "env_threads": e, "sps": round(r, 1)} for (b, e), r in sorted(m.env_rate.items())],
            "inference_rate": [{"envs": b, "sps": round(r, 1)} for b, r in sorted(m.inference_rate.items())],
            "candidates": [dataclasses.asdict(c) for c in self.candidates],
        }


def candidate_splits(num_envs: int, actor_devices: int, learner_devices: int, cores: int,
                     processes: int = 1) -> list[tuple[int, int]]:
    """`(threads per actor device, envs per thread)` that split `num_envs` evenly, give each
    thread a batch divisible by the learner devices, and have no more threads than cores."""
    per_device = num_envs // (processes * actor_devices)
    splits = []
    for threads in range(1, max(1, cores) + 1):
        if per_device % threads == 0 and (per_device // threads) % learner_devices == 0:
            splits.append((threads, per_device // threads))
    return splits or [(1, per_device)]


def candidate_env_threads(envs_per_thread: int, threads: int, cores: int) -> list[int]:
    """EnvPool threads per actor thread worth trying: one, and the host's cores shared
    evenly between the threads (never more than the batch has envs)."""
    options = {1, max(1, cores // threads)}
    return sorted(e for e in options if e <= envs_per_thread) or [1]


def predict(b: int, threads: int, env_threads: int, devices: int, env_rate: float, inference_rate: float,
            cores: int, shared_cores: bool) -> tuple[float, float, float]:
    """`(predicted env steps/s, environments' cap, inference cap)` of `devices * threads`
    actor threads of `b` envs (see the module docstring)."""
    total_threads = devices * threads
    env_threads = env_threads or min(b, cores)  # 0: EnvPool's default, a thread per env up to the cores
    per_thread = 1.0 / (1.0 / inference_rate + 1.0 / env_rate)
    env_cap = total_threads * env_rate * min(1.0, cores / (total_threads * env_threads))
    inference_cap = devices * inference_rate
    host_cap = 1.0 / (1.0 / inference_cap + 1.0 / env_cap) if shared_cores else min(inference_cap, env_cap)
    return min(total_threads * per_thread, host_cap), env_cap, inference_cap


def choose_layout(measurements: Measurements, num_envs: int, actor_devices: int, learner_devices: int,
                  rollout_length: int, step_bytes: int, queue_size: int = 1, budgets: Budgets = Budgets(),
                  processes: int = 1, manual: tuple[int, int] | None = None) -> LayoutChoice:
    """The layout with the highest predicted env steps/s within `budgets`; where layouts
    were tried (`Measurements.trial_rate`), the tried one with the highest rate.

    Args:
      measurements: rates measured on this host (`measure`), or made up in a test. Every
        batch size of `candidate_splits` must have an `inference_rate`; a missing
        `env_rate` entry takes that of the nearest thread count measured for the batch.
      num_envs: `arch.num_envs`, environments over every actor thread of every process.
      actor_devices, learner_devices: devices of each role in this process.
      rollout_length: env steps per environment per trajectory.
      step_bytes: host bytes of one environment's transition (observation and next one).
      queue_size: trajectories each actor thread may have waiting.
      budgets: memory and policy-lag limits.
      processes: processes that share `num_envs`.
      manual: `(threads per actor device, EnvPool threads)` of the config's own (manual)
        layout, a candidate too when it splits `num_envs`.

    Returns:
      The choice: the config's own layout if it was tried and is within `KEEP_OWN` of the
      best; else, among candidates within `TIE` of the best, the one with two or more
      threads per actor device (inference overlapping env steps), then the fewest host
      threads. ConfigError naming
      `arch.num_envs` if no candidate fits the budgets.
    """
    cores = measurements.cores
    splits = candidate_splits(num_envs, actor_devices, learner_devices, cores, processes)
    pairs = [(threads, b, e) for threads, b in splits for e in candidate_env_threads(b, actor_devices * threads, cores)]
    if manual is not None and manual not in [(t, e) for t, _, e in pairs]:
        per_device = num_envs // (processes * actor_devices)
        threads, e = manual
        if per_device % threads == 0 and (per_device // threads) % learner_devices == 0 and threads <= per_device:
            pairs.append((threads, per_device // threads, e))
    candidates = []
    for threads, b, env_threads in pairs:
        if b not in measurements.inference_rate:  # the manual layout's batch, not measured: tried or left out
            if (threads, env_threads) not in measurements.trial_rate:
                continue
        else:
            env_rate = _env_rate(measurements, b, env_threads)
            inference_rate = measurements.inference_rate[b]
            sps, env_cap, inference_cap = predict(b, threads, env_threads, actor_devices, env_rate, inference_rate,
                                                  cores, measurements.shared_cores)
        tried = measurements.trial_rate.get((threads, env_threads))
        if b not in measurements.inference_rate:
            env_cap = inference_cap = sps = tried
        # A rollout of one thread at the rate it would run (the trial's, else predicted).
        rollout_s = rollout_length * b * actor_devices * threads / (tried or sps)
        memory = actor_devices * threads * (queue_size + 2) * b * rollout_length * step_bytes
        fits = memory <= budgets.memory_bytes and rollout_s <= budgets.max_rollout_s
        candidates.append(Candidate(threads, b, env_threads, tried or sps, env_cap, inference_cap, rollout_s, memory,
                                    fits, tried is not None))
    fitting = [c for c in candidates if c.within_budgets]
    if not fitting:
        least = min(candidates, key=lambda c: c.memory_bytes)
        raise ConfigError(
            f"arch.num_envs: no actor layout fits the budgets ({budgets.memory_bytes / GIB:.1f} GiB of trajectories "
            f"in flight, rollouts of at most {budgets.max_rollout_s:.0f} s); the smallest needs "
            f"{least.memory_bytes / GIB:.1f} GiB and {least.rollout_s:.1f} s per rollout, got {num_envs}")
    # Predictions miss contention that trials see: once any layout was tried, only tried ones compete.
    fitting = [c for c in fitting if c.tried] or fitting
    best = max(c.predicted_sps for c in fitting)
    near = [c for c in fitting if c.predicted_sps >= (1 - TIE) * best]
    # The config's own layout, once tried, stays unless another tried beats it by more than
    # KEEP_OWN (a trial's noise is no reason to change it). Other ties: two or more batches
    # per device (inference overlapping env steps), then fewer threads.
    own = [c for c in fitting if c.tried and (c.threads_per_actor_device, c.env_threads) == manual]
    if own and own[0].predicted_sps >= (1 - KEEP_OWN) * best:
        near = own
    chosen = min(near, key=lambda c: (c.threads_per_actor_device < 2, c.threads_per_actor_device * c.env_threads,
                                      -c.predicted_sps))
    bound = "environments" if chosen.env_sps <= chosen.inference_sps else "inference"
    return LayoutChoice(
        threads_per_actor_device=chosen.threads_per_actor_device, envs_per_thread=chosen.envs_per_thread,
        env_threads=chosen.env_threads, predicted_sps=chosen.predicted_sps, bound=bound,
        reason=_reason(chosen, measurements, actor_devices, bound, budgets, len(candidates)),
        candidates=tuple(candidates), measurements=measurements,
    )


def _env_rate(measurements: Measurements, b: int, env_threads: int) -> float:
    """The measured rate of a batch of `b` with `env_threads`, or with the nearest thread
    count measured for that batch."""
    if (b, env_threads) in measurements.env_rate:
        return measurements.env_rate[(b, env_threads)]
    measured = [(abs(e - env_threads), rate) for (size, e), rate in measurements.env_rate.items() if size == b]
    if not measured:
        raise ValueError(f"no environment rate measured for a batch of {b}")
    return min(measured)[1]


def shortlist(choice: LayoutChoice, manual: tuple[int, int] | None, count: int = TRIALS) -> list[tuple[int, int]]:
    """`(threads per actor device, EnvPool threads)` of the layouts worth a trial: the
    `count` best predicted within budgets, and the config's own (`manual`)."""
    fitting = sorted((c for c in choice.candidates if c.within_budgets), key=lambda c: -c.predicted_sps)
    chosen = [(c.threads_per_actor_device, c.env_threads) for c in fitting[:count]]
    if manual is not None and manual not in chosen:
        chosen.append(manual)
    return chosen


def _reason(c: Candidate, m: Measurements, devices: int, bound: str, budgets: Budgets, considered: int) -> str:
    threads = devices * c.threads_per_actor_device
    overlap = ("so one thread's inference overlaps another's env step" if c.threads_per_actor_device >= 2
               else "one batch per device: nothing to overlap it with was faster")
    sharing = ("the policy runs on the host's CPU, sharing its cores with the environments"
               if m.shared_cores else "the policy runs on its own device, beside the environments")
    measured = ""
    if c.envs_per_thread in m.inference_rate:
        measured = (f"Measured here: EnvPool alone {_env_rate(m, c.envs_per_thread, c.env_threads):,.0f} env "
                    f"steps/s per batch of {c.envs_per_thread}, the policy alone "
                    f"{m.inference_rate[c.envs_per_thread]:,.0f}/s per device; {sharing}. ")
    pool = f"{c.env_threads} EnvPool thread(s)" if c.env_threads else "EnvPool's default threads"
    rate = (f"Tried whole among {len(m.trial_rate)} layouts, it ran {c.predicted_sps:,.0f} env steps/s" if c.tried
            else f"Predicted {c.predicted_sps:,.0f} env steps/s")
    return (
        f"layout auto: {c.threads_per_actor_device} actor thread(s) per actor device x {c.envs_per_thread} envs, "
        f"{pool} each ({threads} actor thread(s) on {m.cores} cores), {overlap}. {measured}{rate}, "
        f"bound by the {bound} (caps: environments {c.env_sps:,.0f}/s, "
        f"inference {c.inference_sps:,.0f}/s); best of {considered} candidates, within "
        f"{c.memory_bytes / GIB:.2f} of {budgets.memory_bytes / GIB:.0f} GiB in flight and {c.rollout_s:.2f} of "
        f"{budgets.max_rollout_s:.0f} s per rollout."
    )


def step_bytes(obs_spec: ObservationSpec) -> int:
    """Host bytes of one environment's transition: its observation and the next one."""
    sizes = obs_spec_map(lambda leaf: math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize, obs_spec)
    return 2 * int(sum(jax.tree.leaves(sizes)))


def host_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def measure(config: Config, agent: Agent, policy_step: Callable[..., Any], batch_sizes: list[int],
            env_threads: dict[int, list[int]], device: Any, cores: int, seconds: float = MEASURE_S,
            rounds: int = ROUNDS) -> Measurements:
    """Time, on this host, the environment alone and the policy alone at each batch size.

    Every rate is timed in `rounds` windows, the environment's alternating with the
    policy's, and the best window kept: other processes on the same cores slow some windows
    down, never speed one up.

    Args:
      config: the run's config (its `env` and `seed`).
      agent: the agent whose policy acts.
      policy_step: `sebulba.actor.make_policy_step(agent)`.
      batch_sizes: envs per actor thread to try.
      env_threads: EnvPool threads to try for each batch size.
      device: the actor device the policy runs on.
      cores: host cores (`host_cores()`).
      seconds: how long each rate is timed, over all rounds.
      rounds: rounds over the candidates.

    Returns:
      The measured rates.
    """
    key = jax.random.key(config.seed)
    params = jax.device_put(jax.jit(lambda k: agent.init(k).params)(key), device)
    window = seconds / rounds
    env_rate: dict[tuple[int, int], float] = {}
    inference_rate: dict[int, float] = {}
    for b in batch_sizes:  # one EnvPool alive at a time: a many-core host tries many large batches
        for e in env_threads[b]:
            env = make_host_env(config.env, b, config.seed, e)
            try:
                state = initial_acting_state(agent, env.reset(), jax.device_put(key, device), device)
                infer = _inference(policy_step, params, state)
                action = np.asarray(infer())  # compiles this batch size
                rates, inferences = [], []
                for _ in range(rounds):  # the policy's windows between the env's, where not measured yet
                    rates.append(_rate(lambda env=env, action=action: _step(env, action), b, window))
                    if b not in inference_rate:
                        inferences.append(_rate(infer, b, window))
                env_rate[(b, e)] = max(rates)
                if inferences:
                    inference_rate[b] = max(inferences)
            finally:
                env.close()
    return Measurements(env_rate, inference_rate, cores, shared_cores=device.platform == "cpu")


def _inference(policy_step: Callable[..., Any], params: Any, state: Any) -> Callable[[], Any]:
    """One inference on `state`'s observations, waited for."""
    return lambda: jax.block_until_ready(policy_step(params, state.obs, state.key, state.core, state.start)[0])


def _step(env: Any, action: np.ndarray) -> None:
    env.send(action)
    env.recv()


def _rate(call: Callable[[], Any], batch: int, seconds: float) -> float:
    """Env steps per second of `call` (one batch of `batch` per call), after one untimed
    call (compilation) and for at least `seconds`."""
    call()
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        call()
        calls += 1
    return calls * batch / (time.perf_counter() - start)


def trial(config: Config, agent: Agent, policy_step: Callable[..., Any], params: dict[Any, Any],
          threads_per_device: int, envs_per_thread: int, env_threads: int, seconds: float = TRIAL_S) -> float:
    """Env steps per second of one layout tried whole: every actor thread stepping its own
    envs and acting on its device (no trajectories, no learner), for `seconds` after every
    thread has stepped once.

    Args:
      config: the run's config (its `env` and `seed`).
      agent: the agent whose policy acts.
      policy_step: `sebulba.actor.make_policy_step(agent)`.
      params: the policy's parameters on each actor device, `{device: params}`.
      threads_per_device, envs_per_thread, env_threads: the layout.
      seconds: how long it is timed.

    Returns:
      Env steps per second over every thread.
    """
    devices = list(params)
    count = len(devices) * threads_per_device
    counts = np.zeros(count, np.int64)
    group = ThreadGroup()

    def act(k: int, stop: threading.Event) -> None:
        device = devices[k % len(devices)]
        env = make_host_env(config.env, envs_per_thread, config.seed + k, env_threads)
        try:
            key = jax.device_put(jax.random.key(config.seed + k), device)
            obs, key, core, start = initial_acting_state(agent, env.reset(), key, device)
            while not stop.is_set():
                action, _, core, key = policy_step(params[device], obs, key, core, start)
                env.send(np.asarray(action))
                ts = env.recv().timestep
                obs = ts.obs
                if start is not None:
                    start = ts.terminated | ts.truncated
                counts[k] += envs_per_thread
        finally:
            env.close()

    for k in range(count):
        group.start(f"layout-trial-{k}", act, k, group.stop)
    try:
        deadline = time.monotonic() + COMPILE_TIMEOUT_S
        while not np.all(counts > 0) and group.error is None and time.monotonic() < deadline:
            time.sleep(0.02)
        before, start = counts.sum(), time.perf_counter()
        while time.perf_counter() - start < seconds and group.error is None:
            time.sleep(0.02)
        return float((counts.sum() - before) / (time.perf_counter() - start))
    finally:
        group.join()
        group.raise_error()


def resolve(config: Config, agent: Agent, obs_spec: ObservationSpec, actor_devices: list[Any], learner_devices: int,
            policy_step: Callable[..., Any], processes: int = 1, budgets: Budgets = Budgets()) -> LayoutChoice:
    """Measure this host, predict every candidate layout, try the best predicted and the
    config's own whole, and choose (see `choose_layout`)."""
    arch = config.arch
    cores = host_cores()
    devices = len(actor_devices)
    splits = candidate_splits(arch.num_envs, devices, learner_devices, cores, processes)
    threads = {b: candidate_env_threads(b, devices * t, cores) for t, b in splits}
    measured = measure(config, agent, policy_step, [b for _, b in splits], threads, actor_devices[0], cores)
    manual = (arch.threads_per_actor_device, arch.env_threads)
    sizes = dict(num_envs=arch.num_envs, actor_devices=devices, learner_devices=learner_devices,
                 rollout_length=arch.rollout_length, step_bytes=step_bytes(obs_spec), queue_size=arch.queue_size,
                 budgets=budgets, processes=processes, manual=manual)
    predicted = choose_layout(measured, **sizes)
    params = jax.jit(lambda k: agent.init(k).params)(jax.random.key(config.seed))
    on_devices = {device: jax.device_put(params, device) for device in actor_devices}
    per_device = arch.num_envs // (processes * devices)
    layouts = [(t, e) for t, e in shortlist(predicted, manual) if per_device % t == 0]
    tried: dict[tuple[int, int], float] = {}
    for _ in range(TRIAL_ROUNDS):  # in turn, each keeping its best round (as `measure`)
        for t, e in layouts:
            rate = trial(config, agent, policy_step, on_devices, t, per_device // t, e, TRIAL_S / TRIAL_ROUNDS)
            tried[(t, e)] = max(tried.get((t, e), 0.0), rate)
    return choose_layout(dataclasses.replace(measured, trial_rate=tried), **sizes)
