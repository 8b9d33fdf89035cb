"""Devices and sizes derived from a config (computed, never written back), checked
before anything is compiled.

Device indices in the config are local: with several processes every process uses the
same indices of its own devices. Its actor threads act on its actor devices, and the
learner mesh spans the learner devices of every process. `arch.num_envs` counts the
environments of all processes together, so a config means the same batch on 1 or N
processes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax

from podracer.config import Config, check
from podracer.runner.sizes import update_sizes
from sebulba.config import SebulbaConfig


@dataclasses.dataclass(frozen=True)
class Layout:
    actor_devices: tuple[jax.Device, ...]  # this process's
    learner_devices: tuple[jax.Device, ...]  # the learner mesh: those of every process, in process order
    num_actor_threads: int  # this process's: actor devices x threads per device
    envs_per_thread: int
    env_threads: int  # EnvPool worker threads per actor thread (0: EnvPool's default)
    steps_per_update: int  # env steps per update, all processes: num_envs * rollout_length
    num_updates: int  # for the whole run
    auto: Any = None  # `arch.layout="auto"`: the `sebulba.layout_choice.LayoutChoice` these sizes come from

    def actor_device_of(self, thread: int) -> jax.Device:
        return self.actor_devices[thread % len(self.actor_devices)]


def device_indices(arch: SebulbaConfig, num_devices: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`(actor, learner)` device indices, defaults filled in (see `SebulbaConfig`)."""
    for name in ("actor_devices", "learner_devices"):
        for index in getattr(arch, name):
            check(index < num_devices, f"arch.{name}",
                  f"names device {index} but only {num_devices} exist", getattr(arch, name))
    every = tuple(range(num_devices))
    actor, learner = arch.actor_devices, arch.learner_devices
    if not actor and not learner:
        return ((0,), (0,)) if num_devices == 1 else ((0,), every[1:])
    if not learner:
        return actor, tuple(d for d in every if d not in actor) or actor
    if not actor:
        return (tuple(d for d in every if d not in learner) or learner)[:1], learner
    return actor, learner


def process_devices() -> list[list[Any]]:
    """Every process's devices, `[process][local index]`; ConfigError unless every process
    has as many."""
    per_process = [sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                   for p in range(jax.process_count())]
    counts = {len(devices) for devices in per_process}
    check(len(counts) == 1, "distributed", "every process must have the same number of devices",
          [len(devices) for devices in per_process])
    return per_process


def make_layout(config: Config, devices: Sequence[Any] | None = None, auto: Any = None) -> Layout:
    """Resolve devices and sizes; ConfigError (naming the field) if they cannot work.

    `devices` (one process's devices) overrides the discovered ones, for tests. `auto` (a
    `sebulba.layout_choice.LayoutChoice`) replaces the config's threads per actor device and
    EnvPool threads; with `arch.layout="auto"` and no choice yet, one thread per actor
    device (the checks that hold for every split)."""
    arch: SebulbaConfig = config.arch
    if auto is not None:
        arch = dataclasses.replace(arch, threads_per_actor_device=auto.threads_per_actor_device,
                                   env_threads=auto.env_threads)
    elif arch.layout == "auto":
        arch = dataclasses.replace(arch, threads_per_actor_device=1)
    per_process = [list(devices)] if devices is not None else process_devices()
    here = 0 if devices is not None else jax.process_index()
    processes = len(per_process)
    actor, learner = device_indices(arch, len(per_process[here]))
    threads = len(actor) * arch.threads_per_actor_device
    check(arch.num_envs % (threads * processes) == 0, "arch.num_envs",
          f"must be divisible by the number of actor threads ({processes} processes x {len(actor)} actor "
          f"devices x {arch.threads_per_actor_device} threads = {threads * processes})", arch.num_envs)
    per_thread = arch.num_envs // (threads * processes)
    check(per_thread % len(learner) == 0, "arch.num_envs",
          f"must give each actor thread a number of envs ({per_thread}) divisible by the "
          f"number of learner devices ({len(learner)})", arch.num_envs)
    steps_per_update, num_updates = update_sizes(config)
    return Layout(
        actor_devices=tuple(per_process[here][i] for i in actor),
        learner_devices=tuple(devices[i] for devices in per_process for i in learner),
        num_actor_threads=threads,
        envs_per_thread=per_thread,
        env_threads=arch.env_threads,
        steps_per_update=steps_per_update,
        num_updates=num_updates,
        auto=auto,
    )
