"""Settings of the Sebulba architecture."""

from __future__ import annotations

import dataclasses

from podracer.config import check

LAYOUTS = ("manual", "auto")


@dataclasses.dataclass(frozen=True)
class SebulbaConfig:
    """Sebulba: host environments stepped by actor threads, one learner over a device mesh.

    Devices are local device indices. With both lists empty, one device plays both roles
    and N > 1 devices split 1 actor : N - 1 learners; with one list given, the other gets
    the remaining devices (or the same ones, if none remain).

    Each update consumes one trajectory `[rollout_length, num_envs / threads, ...]` from
    every actor thread, so its batch is `num_envs * rollout_length` transitions, split
    evenly over the learner devices.

    `layout="auto"` measures this host (EnvPool's own batch rate, the policy's inference
    rate) and chooses `threads_per_actor_device` and `env_threads` for it (see
    `sebulba.autolayout`); `num_envs`, the update's batch, stays the user's, so what is
    learned does not depend on the layout. `"manual"` uses the two fields as written.
    """

    num_envs: int = 8  # environments in total, over every actor thread
    rollout_length: int = 128  # env steps per environment per trajectory
    actor_devices: tuple[int, ...] = ()  # local device indices that act; empty: the first device not learning (0)
    learner_devices: tuple[int, ...] = ()  # local device indices that learn; empty: those not acting (or the actor's)
    threads_per_actor_device: int = 1  # actor threads per actor device, each with its own env batch
    max_policy_lag: int = 0  # 0: on-policy, actors wait for each update; 1: one version behind (Cleanba)
    queue_size: int = 1  # trajectories each actor thread may have waiting for the learner
    env_threads: int = 0  # EnvPool worker threads per actor thread; 0: EnvPool's default
    updates_per_log: int = 10  # learner updates per metrics row
    layout: str = "manual"  # "manual": the thread fields as written; "auto": measured and chosen for this host

    def __post_init__(self) -> None:
        check(self.num_envs >= 1, "arch.num_envs", "must be >= 1", self.num_envs)
        check(self.rollout_length >= 1, "arch.rollout_length", "must be >= 1", self.rollout_length)
        for name in ("actor_devices", "learner_devices"):
            devices = getattr(self, name)
            check(len(set(devices)) == len(devices), f"arch.{name}", "must not repeat a device", devices)
            check(all(d >= 0 for d in devices), f"arch.{name}", "must be device indices >= 0", devices)
        check(self.threads_per_actor_device >= 1, "arch.threads_per_actor_device", "must be >= 1",
              self.threads_per_actor_device)
        check(self.max_policy_lag >= 0, "arch.max_policy_lag", "must be >= 0", self.max_policy_lag)
        check(self.queue_size >= 1, "arch.queue_size", "must be >= 1", self.queue_size)
        check(self.env_threads >= 0, "arch.env_threads", "must be >= 0", self.env_threads)
        check(self.layout in LAYOUTS, "arch.layout", f"must be one of {', '.join(LAYOUTS)}", self.layout)
        check(self.updates_per_log >= 1, "arch.updates_per_log", "must be >= 1", self.updates_per_log)
