"""The choice of Sebulba's actor layout from measured rates (`arch.layout="auto"`).

`choose_layout` is a pure function of the rates `sebulba.autolayout.measure` times on this
host, the core count and the budgets: it predicts the actors' env steps/s for every
candidate and keeps the best, so it can be tested with made-up rates.

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
from typing import Any

from podracer.config import ConfigError

TIE = 0.05  # candidates within this fraction of the best prediction count as equal
TRIALS = 2  # best predicted layouts tried whole (with the config's own) before choosing
KEEP_OWN = 0.10  # the config's own layout, tried, stays unless another tried is this much faster
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
