"""Per-device agent state (`AgentState.local`, e.g. a replay buffer) on a runner's mesh.

A runner keeps the agent state replicated over its device axis, except `local`, which has
one slice per device: `[D, ...]` (Sebulba's learner) or `[S, D, ...]` (Anakin, after the
seed axis). `seed_axes` says how many axes come before the device axis. Inside
`shard_map` each device sees its own slice `[1, ...]`; the agent sees it without the
device axis, so the runner strips the axis before `agent.update` and adds it back after.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from podracer.types import AgentState


def agent_state_specs(state: AgentState, axis: str, seed_axes: int = 0) -> AgentState:
    """Partition specs of an agent state (or a tree of the same structure): `P()`
    (replicated) for everything but `local`, which is split over `axis` after `seed_axes`
    leading axes, never averaged."""
    local = P(*(None,) * seed_axes, axis)
    return jax.tree.map(lambda _: P(), state.replace(local=None)).replace(
        local=jax.tree.map(lambda _: local, state.local))


def strip_device_axis(local: Any, seed_axes: int = 0) -> Any:
    """A device's own slice of per-device state without its device axis: `[.., 1, ...] -> [.., ...]`."""
    index = (slice(None),) * seed_axes + (0,)
    return jax.tree.map(lambda x: x[index], local)


def add_device_axis(local: Any, seed_axes: int = 0) -> Any:
    """Undo `strip_device_axis`: `[.., ...] -> [.., 1, ...]`."""
    return jax.tree.map(lambda x: jnp.expand_dims(x, seed_axes), local)


def broadcast_device_axis(local: Any, num_devices: int, seed_axes: int = 0) -> Any:
    """Per-device state where every device starts from the same value: `[.., ...] ->
    [.., D, ...]`. NumPy leaves give a broadcast host view (placing it copies one slice to
    each device, never a `D` times larger host array); JAX leaves (traced) a JAX array."""

    def broadcast(x: Any) -> Any:
        shape = x.shape[:seed_axes] + (num_devices,) + x.shape[seed_axes:]
        if isinstance(x, np.ndarray):
            return np.broadcast_to(np.expand_dims(x, seed_axes), shape)
        return jnp.broadcast_to(jnp.expand_dims(x, seed_axes), shape)

    return jax.tree.map(broadcast, local)
