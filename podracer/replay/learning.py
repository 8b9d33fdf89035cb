"""The gradient-step loop of every replay agent (DQN, SAC, TD3, MuZero): an update takes the
`num_steps` gradient steps its schedule earned (`podracer.replay.schedule`), each on a batch
sampled from this device's buffer, and logs the means of the steps' metrics.

The algorithm supplies one step, `step(carry, key) -> (carry, metrics)`: sample, learn on
the batch (gradients averaged over the device axis), update what it carries (parameters,
learner state, a prioritized buffer's priorities). The loop runs it with a traced trip count
(`lax.fori_loop`), or unrolled, and averages the metrics over the steps taken (0 in an update
that takes none) and over devices.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import jax
import jax.numpy as jnp

from podracer import parallel
from podracer.types import Array, PRNGKey

Carry = TypeVar("Carry")


def learn_steps(
    step: Callable[[Carry, PRNGKey], tuple[Carry, dict[str, Array]]],
    carry: Carry,
    key: PRNGKey,
    num_steps: Array,
    max_steps: int,
    axis_name: parallel.AxisName,
    unroll: bool = False,
) -> tuple[Carry, dict[str, Array]]:
    """`num_steps` (traced, <= `max_steps`) applications of `step`, each with its own key.

    Args:
        step: `(carry, key) -> (carry, metrics)`: one gradient step; `metrics` a dict of
            scalars (`[]`), the same names every step.
        carry: what the steps update, a pytree.
        key: split into `max_steps` keys, step i taking the i-th.
        num_steps: `int32 []`: the steps to take.
        max_steps: the static bound of `num_steps`.
        axis_name: the device axis the metrics are averaged over (None: one device).
        unroll: unroll `max_steps` steps and keep the results of the first `num_steps`:
            XLA:CPU runs convolution gradients inside a loop body (or a cond branch) many
            times slower than outside one. At most one step is computed in vain once
            learning has started (none when the credit per update is whole), but all of
            them before. Leaves that a step does not change pass through.

    Returns:
        `(carry, metrics)`: the carry after the steps, and each metric's mean over the steps
        taken (0 if none) and over devices.
    """
    keys = jax.random.split(key, max_steps)

    def varying(tree: Any) -> Any:
        # The per-step metrics mix device-varying (a loss) and invariant (a gradient norm)
        # values; a loop carry needs one type, so all are summed as varying and averaged after.
        return tree if axis_name is None else parallel.to_varying(tree, axis_name)

    # jit'ed so that the shapes below and every step of the loop share one trace of `step`
    # (a gradient step is the costliest thing to trace; unrolled, there are max_steps of them).
    @jax.jit
    def one_step(carry: Carry, key: PRNGKey) -> tuple[Carry, dict[str, Array]]:
        carry, metrics = step(carry, key)
        return carry, varying(metrics)

    def body(i: Array, loop: tuple[Carry, dict[str, Array]]) -> tuple[Carry, dict[str, Array]]:
        carry, sums = loop
        carry, metrics = one_step(carry, keys[i])
        return carry, jax.tree.map(jnp.add, sums, metrics)

    shapes = jax.eval_shape(one_step, carry, keys[0])[1]
    loop = (carry, varying(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)))
    if unroll:
        for i in range(max_steps):
            new = body(i, loop)
            take = i < num_steps
            loop = jax.tree.map(lambda n, o, take=take: o if n is o else jnp.where(take, n, o), new, loop)
    else:
        loop = jax.lax.fori_loop(0, num_steps, body, loop)
    carry, sums = loop
    means = jax.tree.map(lambda x: x / jnp.maximum(num_steps, 1).astype(x.dtype), sums)
    return carry, parallel.pmean(means, axis_name)
