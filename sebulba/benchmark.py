"""Throughput of a Sebulba config against its physical limit (`podracer bench sebulba`).

- `limit_sps`: the same actor threads, environments and policy inference, and nothing
  else (no trajectories, no learner): the most the actors could ever produce.
- `actor_sps`: the whole actor pipeline (trajectory buffers, sharding onto the learner
  devices, the bounded queues) with a learner that consumes every trajectory as soon as
  it is on its devices but does not update: what the actors deliver.
- `sps`: end-to-end training, after compilation.
- `env_limit_sps`, `inference_limit_sps`: the same threads stepping only the environments
  (EnvPool's own rate with these cores), or only running the policy; `learner_limit_sps`:
  the learner's updates alone, in env steps per second. Whichever is lowest bounds training.

Each is measured after a warm-up: until every thread has stepped (compilation included),
then `WARMUP_S` more.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import jax
import numpy as np

from podracer.agents.muzero import without_search
from podracer.config import Config
from podracer.envs.host import make_host_env
from podracer.runner import Hooks
from sebulba.actor import Actor, initial_acting_state, make_policy_step
from sebulba.learner import make_key_split, make_update_step
from sebulba.runner import (
    Setup,
    actor_seed,
    initial_learner_state,
    initial_state,
    make_actors,
    param_sources,
    run,
    setup,
)
from sebulba.threads import ThreadGroup, get

WARMUP_S = 1.0
COMPILE_TIMEOUT_S = 600.0


def bench(config: Config, seconds: float = 10.0, rounds: int = 3) -> dict[str, Any]:
    """`{"limit_sps", "actor_sps", "sps", "actor_fraction", ...}` for `config`.

    `limit_sps`, `actor_sps`, `env_limit_sps` (the environments alone, same threads) and
    `inference_limit_sps` (the policy alone, same threads) alternate over `rounds` rounds
    of `seconds / rounds` each and report their medians, so that all see the same machine
    (other processes come and go); `learner_limit_sps` is the learner's update rate alone
    (env steps/s), `sps` is measured over `seconds` of training. `*_cpu_us_per_step` is the
    process CPU time per env step of each (median), and `actor_fraction_by_cpu` their
    ratio: the fraction of the limit the actors would reach on otherwise idle cores.
    `diagnosis` says in one line what bounds the actors (`diagnose`).

    With `arch.layout="auto"`, `layout` is the choice (`LayoutChoice.to_dict`) and the
    config's own thread fields (the manual layout) are measured in the same rounds:
    `manual_actor_sps`, `manual_limit_sps`, and `auto_over_manual` (actor_sps over
    manual_actor_sps).

    For a search agent (MuZero), `limit_sps` acts with the search (on the actor devices);
    `limit_sps_without_search` is the same with the prediction network alone, measured in
    the same rounds, and `search_cost` their ratio.
    """
    s = setup(config)
    state = initial_state(config, s)
    prior = without_search(s.agent, config.agent, s.obs_spec, s.action_spec)
    manual = setup(_manual(config)) if s.layout.auto is not None else None
    window = seconds / rounds
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in
                                                  ("limit", "actor", "env", "inference", "prior", "manual_limit",
                                                   "manual_actor")}
    measurements = {
        "limit": lambda: limit_sps(config, s, state.params, window),
        "actor": lambda: actor_sps(config, s, state.params, window),
        "env": lambda: limit_sps(config, s, state.params, window, part="env"),
        "inference": lambda: limit_sps(config, s, state.params, window, part="inference"),
    }
    if prior is not None:
        measurements["prior"] = lambda: limit_sps(config, s._replace(agent=prior), state.params, window)
    if manual is not None:
        measurements["manual_limit"] = lambda: limit_sps(config, manual, state.params, window)
        measurements["manual_actor"] = lambda: actor_sps(config, manual, state.params, window)
    names = list(measurements)
    for i in range(rounds):  # every other round in reverse: no quantity always first or last
        for name in names if i % 2 == 0 else names[::-1]:
            runs[name].append(measurements[name]())
    median = {name: float(np.median([sps for sps, _ in r])) for name, r in runs.items() if r}
    limit_cpu, actor_cpu = (float(np.median([cpu for _, cpu in runs[name]])) for name in ("limit", "actor"))
    limit, actor = median["limit"], median["actor"]
    extra: dict[str, Any] = {}
    if prior is not None:
        extra = {"limit_sps_without_search": median["prior"], "search_cost": median["prior"] / limit}
    if manual is not None:
        extra.update(manual_limit_sps=median["manual_limit"], manual_actor_sps=median["manual_actor"],
                     auto_over_manual=actor / median["manual_actor"],
                     manual_actor_threads=manual.layout.num_actor_threads, layout=s.layout.auto.to_dict())
    result = {
        "env": config.env.id,
        "num_envs": config.arch.num_envs,
        "actor_threads": s.layout.num_actor_threads,
        "envs_per_thread": s.layout.envs_per_thread,
        "env_threads": s.layout.env_threads,
        "actor_devices": len(s.layout.actor_devices),
        "learner_devices": len(s.layout.learner_devices),
        "limit_sps": limit,
        "actor_sps": actor,
        "actor_fraction": actor / limit,
        "env_limit_sps": median["env"],
        "inference_limit_sps": median["inference"],
        "learner_limit_sps": learner_limit_sps(config, s, window),
        **extra,
        "limit_cpu_us_per_step": limit_cpu,
        "actor_cpu_us_per_step": actor_cpu,
        "actor_fraction_by_cpu": limit_cpu / actor_cpu,
        "sps": training_sps(config, s, seconds),
        "rounds": {f"{name}_sps": [sps for sps, _ in r] for name, r in runs.items() if r},
        # Process CPU microseconds per env step of each (median): what other processes on the
        # same cores distort least, so auto and manual compare on a loaded machine too.
        "cpu_us_per_step": {name: float(np.median([cpu for _, cpu in r])) for name, r in runs.items() if r},
    }
    result["diagnosis"] = diagnose(result)
    return result


def _manual(config: Config) -> Config:
    """`config` with the layout its thread fields give (`arch.layout="manual"`)."""
    return dataclasses.replace(config, arch=dataclasses.replace(config.arch, layout="manual"))


def diagnose(result: dict[str, float]) -> str:
    """One line: what bounds the actors (the environments or inference, whichever alone is
    slower) and how close they come to it; then whether the learner bounds training.

    Args:
      result: `actor_sps`, `env_limit_sps`, `inference_limit_sps`, `learner_limit_sps`
        and `sps` (env steps per second), as `bench` measures them.

    Returns:
      e.g. "actors bound by the environments: 94% of EnvPool's own rate (...)".
    """
    actor, env, inference = result["actor_sps"], result["env_limit_sps"], result["inference_limit_sps"]
    learner, sps = result["learner_limit_sps"], result["sps"]
    if env <= inference:
        line = (f"actors bound by the environments: {actor / env:.0%} of EnvPool's own rate "
                f"({actor:,.0f} of {env:,.0f} env steps/s; inference alone {inference:,.0f}/s)")
    else:
        line = (f"actors bound by inference: {actor / inference:.0%} of the policy's own rate "
                f"({actor:,.0f} of {inference:,.0f} env steps/s; environments alone {env:,.0f}/s)")
    if learner < actor:
        line += f"; training bound by the learner ({learner:,.0f} env steps/s alone, {sps:,.0f} training)"
    else:
        line += f"; learner alone {learner:,.0f} env steps/s, training {sps:,.0f}"
    return line


def _measure(group: ThreadGroup, counts: np.ndarray, seconds: float) -> tuple[float, float]:
    """`(env steps per second, process CPU microseconds per env step)` summed over
    `counts`, between warm-up and warm-up + seconds. The warm-up lasts until every counter
    has moved (the policy is compiled: on a loaded machine that can take longer than any
    fixed warm-up), then `WARMUP_S` more. CPU time per step is what a loaded machine
    (other processes on the same cores) distorts least."""
    try:
        _wait_until_counting(group, counts)
        _sleep(group, WARMUP_S)
        before, start, cpu = counts.sum(), time.perf_counter(), time.process_time()
        _sleep(group, seconds)
        steps = counts.sum() - before
        sps = float(steps / (time.perf_counter() - start))
        return sps, float((time.process_time() - cpu) / max(steps, 1) * 1e6)
    finally:
        group.join()
        group.raise_error()


def _wait_until_counting(group: ThreadGroup, counts: np.ndarray, timeout_s: float = COMPILE_TIMEOUT_S) -> None:
    """Wait until every counter is above zero; RuntimeError after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while not np.all(counts > 0) and group.error is None:
        if time.monotonic() > end:
            raise RuntimeError(f"bench: no env steps within {timeout_s:.0f} s")
        time.sleep(0.05)


def _sleep(group: ThreadGroup, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and group.error is None:
        time.sleep(0.05)


def limit_sps(config: Config, s: Setup, params: Any, seconds: float, part: str = "both") -> tuple[float, float]:
    """Environment steps plus policy inference only, same threads and environments.

    `part="env"`: the environments alone (each thread sends its first action again every
    step: EnvPool's own rate with these threads and cores); `part="inference"`: the policy
    alone (each thread acts on its first observations again and again)."""
    policy_step = make_policy_step(s.agent)
    counts = np.zeros(s.layout.num_actor_threads, np.int64)
    group = ThreadGroup()
    for k in range(s.layout.num_actor_threads):
        device = s.layout.actor_device_of(k)
        group.start(f"limit-{k}", _step_only, config, s, jax.device_put(params, device), device,
                    policy_step, k, counts, group.stop, part)
    return _measure(group, counts, seconds)


def _step_only(config: Config, s: Setup, params: Any, device: Any, policy_step: Any, k: int,
               counts: np.ndarray, stop: threading.Event, part: str = "both") -> None:
    seed = actor_seed(config.seed, k)
    env = make_host_env(config.env, s.layout.envs_per_thread, seed, s.layout.env_threads)
    try:
        key = jax.device_put(jax.random.key(seed), device)
        obs, key, core, start = initial_acting_state(s.agent, env.reset(), key, device)
        action = jax.device_get(policy_step(params, obs, key, core, start)[0])
        while not stop.is_set():
            if part != "env":
                action, _, next_core, key = policy_step(params, obs, key, core, start)
                action = jax.device_get(action)
                if part == "both":
                    core = next_core
            if part != "inference":
                env.send(action)
                ts = env.recv().timestep
                if part == "both":
                    obs = ts.obs
                    if start is not None:
                        start = ts.terminated | ts.truncated
            counts[k] += env.num_envs
    finally:
        env.close()


def actor_sps(config: Config, s: Setup, params: Any, seconds: float) -> tuple[float, float]:
    """The actor pipeline with a learner that only consumes (never blocks the actors on
    parameters: they keep version 0)."""
    sources = param_sources(s.layout)
    for source in sources.values():
        source.publish(params, 0)
    actors = make_actors(config, s, sources, num_rollouts=None, max_policy_lag=2**62)
    counts = np.zeros(1, np.int64)
    group = ThreadGroup()
    for actor in actors:
        group.start(f"actor-{actor.index}", actor.run, group.stop)
    group.start("consumer", _consume, actors, counts, group.stop)
    return _measure(group, counts, seconds)


def _consume(actors: list[Actor], counts: np.ndarray, stop: threading.Event) -> None:
    while True:
        for actor in actors:
            item, _ = get(actor.out, stop)
            jax.block_until_ready(item.trajectory)
            counts[0] += item.trajectory.reward.size


def learner_limit_sps(config: Config, s: Setup, seconds: float) -> float:
    """The learner alone, in env steps per second: updates on one trajectory from every
    actor thread (collected once by the actors' own code, acting with the initial
    parameters), timed after the first (compiling) one, for at least `seconds` and two
    updates."""
    state = initial_learner_state(config, s)
    sources = param_sources(s.layout)
    for source in sources.values():
        source.publish(state.agent.params, 0)
    stop = threading.Event()
    trajectories = []
    for actor in make_actors(config, s, sources, num_rollouts=1, max_policy_lag=2**62):
        actor.run(stop)  # one rollout into its queue (which holds at least one)
        trajectories.append(actor.out.get_nowait().trajectory)
    update_step, split = make_update_step(s.agent, s.mesh), make_key_split(s.mesh)
    agent_state, key = state.agent, state.key
    updates, start = -1, 0.0
    while updates < 2 or time.perf_counter() - start < seconds:
        key, keys = split(key)
        agent_state, metrics = update_step(agent_state, tuple(trajectories), keys)
        jax.block_until_ready((agent_state, metrics))
        updates += 1
        if updates == 0:  # compiled: time from here
            start = time.perf_counter()
    return updates * s.layout.steps_per_update / (time.perf_counter() - start)


def training_sps(config: Config, s: Setup, seconds: float) -> float:
    """End-to-end env steps per second of training, from the first metrics row (after
    compilation, and past the agent's `learning_starts`: a replay agent takes no gradient
    step before) to the last one within `seconds` more."""
    arch = dataclasses.replace(config.arch, updates_per_log=1)
    long_enough = max(config.total_env_steps, arch.num_envs * arch.rollout_length * 100_000)
    config = dataclasses.replace(config, arch=arch, total_env_steps=long_enough)
    s = setup(config, s.layout.auto)  # the same layout: updates_per_log does not change it
    first_row_at: list[float] = []
    starts = getattr(config.agent, "learning_starts", 0)

    def on_row(row: dict[str, Any]) -> None:
        if not first_row_at and row["env_steps"] >= starts:
            first_row_at.append(time.monotonic())

    def past_deadline() -> bool:  # `seconds` after the first row: compilation is not timed
        return bool(first_row_at) and time.monotonic() > first_row_at[0] + seconds

    rows, _ = run(config, s, initial_learner_state(config, s), Hooks(on_row, should_stop=past_deadline))
    rows = [row for row in rows if row["env_steps"] >= starts]
    if len(rows) < 2:
        raise RuntimeError(f"bench: fewer than two updates in {seconds} s; give it more seconds")
    return (rows[-1]["env_steps"] - rows[0]["env_steps"]) / (rows[-1]["wall_s"] - rows[0]["wall_s"])
