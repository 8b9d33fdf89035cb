"""The guard against non-finite values: a NaN or infinity in the loss or the parameters stops
the run before the state that holds it is checkpointed, so the last good checkpoint stays
the latest (DESIGN.md, Errors).

Both runners check every update's metrics and parameters with `all_finite` (on the
devices) and `check_finite` (on the host); Anakin's carry a leading seed axis `[S]`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.checkpoint import Checkpoints


class NonFiniteError(RuntimeError):
    """A non-finite loss or parameter: the run stops and keeps its last good checkpoint."""


@functools.partial(jax.jit, static_argnames="batch_dims")
def all_finite(tree: Any, batch_dims: int = 0) -> jax.Array:
    """`bool [*batch]`: whether every floating leaf of `tree` is finite, per index of its
    `batch_dims` leading axes (`batch_dims=1`: per seed of Anakin's `[S, ...]` leaves)."""
    flags = [
        jnp.all(jnp.isfinite(x).reshape(x.shape[:batch_dims] + (-1,)), axis=-1)
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(flags), axis=0)


def describe_kept(checkpointer: Checkpoints | None) -> str:
    """What a run stopped by a non-finite value leaves behind, for its error message."""
    kept = None if checkpointer is None else checkpointer.latest_step()
    return "no checkpoint was written" if kept is None else f"the last good checkpoint is update {kept}"


def check_finite(metrics: dict[str, Any], params_finite: Any, where: str, outcome: str, kept: str) -> None:
    """Raise `NonFiniteError` naming the loss metrics (and/or the parameters) that are not finite.

    metrics:       host values, name -> `[]`, or `[S]` with a seed axis.
    params_finite: `all_finite(params)`: `bool []`, or `[S]` with a seed axis (the message
                   then names the seeds).
    where:         the update(s), as the message says it ("at update 6", "in updates 5-8").
    outcome:       what became of the run ("run stopped", ...); `kept` (`describe_kept`)
                   follows it.
    """
    params_finite = np.asarray(params_finite, bool)
    # Each metric's finiteness per seed (or overall): any trailing axes are reduced.
    finite = {name: np.isfinite(np.asarray(value)).reshape(params_finite.shape + (-1,)).all(-1)
              for name, value in metrics.items()}
    ok = np.all([params_finite, *finite.values()], axis=0)
    if np.all(ok):
        return
    bad = sorted(name for name, flags in finite.items() if not np.all(flags))
    what = " and ".join(([f"loss metrics {', '.join(bad)}"] if bad else [])
                        + ([] if np.all(params_finite) else ["parameters"]))
    seeds = f" (seed {', '.join(map(str, np.flatnonzero(~ok)))})" if ok.ndim else ""
    raise NonFiniteError(f"non-finite {what} {where}{seeds}; {outcome}, {kept}")
