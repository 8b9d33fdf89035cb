"""Warm starts: a new run's agent parameters from another run's checkpoint.

Fine-tuning, and transfer from a cheap environment to a costly one with the same
observations and actions (an agent trained on a JAX environment's cheap model under
Anakin, then on the costly host form of the same environment under Sebulba; a fully
convolutional network also moves between grid sizes). Only the parameters travel: the
optimizer state, replay buffers, keys, the environments and the run's counters start
fresh, and so do integer leaves of the parameters (step counters such as PQN's and DQN's
env steps, the position of an exploration schedule). Floating-point leaves are the network weights, a DQN target
network, observation-normalisation statistics: they come from the checkpoint.

Either architecture's checkpoint serves either architecture: an Anakin run stores
parameters with a leading seed axis `[S, ...]`, a Sebulba run without one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from podracer.checkpoint import (
    Checkpointer,
    CheckpointMismatchError,
    NoCheckpointError,
    check_signatures,
    checkpoint_dir,
    leaf_signatures,
)
from podracer.config import ConfigError
from podracer.types import Agent

FIELD = "checkpoint.init_from"
PATH = ("agent", "params")


def warm_params(params: Any, run_dir: str, seed_axis: bool, member: int | None = None) -> Any:
    """`params`, a new run's initial agent parameters (on its devices; `[S, ...]` with
    `seed_axis`), with every floating-point leaf replaced by the same leaf of the latest
    checkpoint of the run in `run_dir`, placed like the leaf it replaces.

    Seeds: from an Anakin run with as many seeds (population members) as this one, seed k
    starts from seed k; otherwise every seed starts from the source's seed 0 (or its only
    parameters); with `member` (`checkpoint.init_member`), every seed starts from that
    member of the source (ConfigError naming the field if it has no such member). Raises
    ConfigError naming `checkpoint.init_from` when `run_dir` has no checkpoint or its
    parameters differ from this run's in structure, shape or dtype (another network).
    """
    per_seed = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:] if seed_axis else x.shape, x.dtype), params)
    num_seeds = jax.tree.leaves(params)[0].shape[0] if seed_axis else 1
    with _source(run_dir) as checkpoints:
        abstract, source_seeds = _layout(checkpoints, per_seed, run_dir)
        check_member(member, source_seeds)
        source, _ = checkpoints.restore_part(abstract, PATH)

    def take(new: jax.Array, old: jax.Array) -> jax.Array:
        if not jnp.issubdtype(new.dtype, jnp.floating):
            return new
        value = np.asarray(old)
        if source_seeds is not None and member is not None:
            value = value[member]
        elif source_seeds is not None and not (seed_axis and source_seeds == num_seeds):
            value = value[0]
        value = np.broadcast_to(value, new.shape)
        return jax.make_array_from_callback(new.shape, new.sharding, lambda index: value[index])

    return jax.tree.map(take, params, source)


def check_source(run_dir: str, agent: Agent, member: int | None = None) -> None:
    """Raise ConfigError naming `checkpoint.init_from` unless `run_dir`'s latest checkpoint
    holds parameters that fit `agent` (and naming `checkpoint.init_member` unless it has
    that member): the check before a run directory is made and anything compiles (it
    reads no arrays)."""
    per_seed = jax.eval_shape(agent.init, jax.random.key(0)).params
    with _source(run_dir) as checkpoints:
        check_member(member, _layout(checkpoints, per_seed, run_dir)[1])


def check_member(member: int | None, source_members: int | None) -> None:
    """ConfigError naming `checkpoint.init_member` unless the source (with `source_members`
    members, None for a Sebulba run's one agent) has member `member`."""
    count = 1 if source_members is None else source_members
    if member is not None and member >= count:
        raise ConfigError(f"checkpoint.init_member must be in [0, {count}) for the run in {FIELD}, got {member}")


@contextlib.contextmanager
def _source(run_dir: str) -> Iterator[Checkpointer]:
    try:  # NoCheckpointError: no directory (opening it), or no complete checkpoint (reading one)
        with Checkpointer(checkpoint_dir(run_dir), read_only=True) as checkpoints:
            yield checkpoints
    except NoCheckpointError as error:
        raise ConfigError(f"{FIELD}: {error}") from None


def _layout(checkpoints: Checkpointer, per_seed: Any, run_dir: str) -> tuple[Any, int | None]:
    """The source's parameters as abstract arrays, and its seed count when they carry a
    leading seed axis (an Anakin run; None for a Sebulba run), checked against `per_seed`."""
    prefix = "".join(f".{name}" for name in PATH)
    saved = {path[len(prefix):]: sig for path, sig in checkpoints.leaf_signatures().items() if path.startswith(prefix)}
    expected = leaf_signatures(per_seed)
    path, (shape, _) = next(iter(expected.items()))
    stored = saved.get(path, [shape])[0]
    seeds = int(stored[0]) if len(stored) == len(shape) + 1 and list(stored[1:]) == list(shape) else None
    if seeds is not None:
        per_seed = jax.tree.map(lambda x: jax.ShapeDtypeStruct((seeds,) + x.shape, x.dtype), per_seed)
    try:
        check_signatures(saved, leaf_signatures(per_seed))
    except CheckpointMismatchError as error:
        detail = str(error).removeprefix("checkpoint does not match the config: ").replace("state", "params", 1)
        raise ConfigError(f"{FIELD}: the agent parameters in {run_dir} do not fit this run's agent "
                          f"(another network or algorithm?): {detail}") from None
    return per_seed, seeds
