"""The actor layout chosen for this host (`arch.layout="auto"`): the measuring half.

`measure` times, on this host, the environment alone (one EnvPool batch of each candidate
size, with each candidate number of EnvPool threads) and the policy alone (one actor device,
the same batch sizes); `trial` runs the best predicted layouts whole; `resolve` puts them
together. The choice from the rates is `sebulba.layout_choice`, a pure function that tests
run with made-up rates.
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

from podracer.config import Config
from podracer.envs.host import make_host_env
from podracer.types import Agent, ObservationSpec, obs_spec_map
from sebulba.actor import initial_acting_state
from sebulba.layout_choice import (
    Budgets,
    LayoutChoice,
    Measurements,
    candidate_env_threads,
    candidate_splits,
    choose_layout,
    shortlist,
)
from sebulba.threads import ThreadGroup

COMPILE_TIMEOUT_S = 600.0  # a trial waits at most this long for every thread's first step
MEASURE_S = 0.6  # seconds each rate is timed (over every round), after a warm-up step
ROUNDS = 3  # rounds over the candidates; each rate keeps its best round
TRIAL_S = 1.0  # seconds each layout is tried in all, after every thread has stepped once
TRIAL_ROUNDS = 2  # rounds over the layouts tried; each keeps its best round


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
