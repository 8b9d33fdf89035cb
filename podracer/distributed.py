"""Multi-process runs with JAX's own multi-controller runtime (`jax.distributed`).

Every process runs the same program over one mesh of all processes' devices; XLA's
collectives (gloo on CPU, NCCL on GPU, ICI on TPU) carry the gradients. There is no
transport of our own. Call `initialize` before anything else touches JAX's backends.
"""

from __future__ import annotations

import jax

from podracer.config import DistributedConfig


def is_multiprocess(config: DistributedConfig) -> bool:
    return config.num_processes > 1 or config.coordinator == "auto"


def initialize(config: DistributedConfig) -> None:
    """Join the run's processes (a no-op for a single-process config or if done already).

    `coordinator="auto"` lets JAX detect the cluster (SLURM, Open MPI, cloud TPU pods);
    otherwise `coordinator` is `host:port` of process 0. A process that stops sending
    heartbeats for `heartbeat_timeout_s` makes every other process exit with an error
    instead of hanging in a collective.
    """
    if not is_multiprocess(config) or jax.distributed.is_initialized():
        return
    # CPU collectives across processes need gloo; GPUs and TPUs ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if config.coordinator == "auto":
        jax.distributed.initialize(heartbeat_timeout_seconds=config.heartbeat_timeout_s)
    else:
        jax.distributed.initialize(
            coordinator_address=config.coordinator,
            num_processes=config.num_processes,
            process_id=config.process_id,
            heartbeat_timeout_seconds=config.heartbeat_timeout_s,
        )


def is_leader() -> bool:
    """True in the process that writes the run directory (process 0)."""
    return jax.process_index() == 0
