"""Settings of the Anakin architecture."""

from __future__ import annotations

import dataclasses

from podracer.config import check


@dataclasses.dataclass(frozen=True)
class AnakinConfig:
    """Anakin: environments and agent compiled together, replicated over local devices.

    num_envs is the total over all devices (it must divide evenly); each host call runs
    `updates_per_call` rollout+update iterations inside one compiled loop and yields one
    metrics line.
    """

    num_envs: int = 4  # environments per seed, in total over the devices (must divide evenly)
    rollout_length: int = 128  # env steps per environment per update
    num_seeds: int = 1  # independent agents trained by one program (an extra vmap axis)
    updates_per_call: int = 32  # updates inside one compiled host call (one metrics row each call)
    devices: tuple[int, ...] = ()  # local device indices; empty = every local device

    def __post_init__(self) -> None:
        check(self.num_envs >= 1, "arch.num_envs", "must be >= 1", self.num_envs)
        check(self.rollout_length >= 1, "arch.rollout_length", "must be >= 1", self.rollout_length)
        check(self.num_seeds >= 1, "arch.num_seeds", "must be >= 1", self.num_seeds)
        check(self.updates_per_call >= 1, "arch.updates_per_call", "must be >= 1", self.updates_per_call)
        # the compiled program takes its update count as an int32
        check(self.updates_per_call < 2**31, "arch.updates_per_call", "must be < 2**31", self.updates_per_call)
        check(self.num_seeds < 2**31, "arch.num_seeds", "must be < 2**31", self.num_seeds)
        check(len(set(self.devices)) == len(self.devices), "arch.devices", "must not repeat a device", self.devices)
        check(all(d >= 0 for d in self.devices), "arch.devices", "must be device indices >= 0", self.devices)
