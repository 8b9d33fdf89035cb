"""The SGD loop of the on-policy agents (epochs of minibatch steps), the gradient norm they
log, an agent's initial state from its parameters and optimizer, and the trace-time check of a
replay agent's per-step metrics."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from podracer.agents.minibatches import Minibatcher
from podracer.types import AgentState, Array, Params, PRNGKey


def make_init(init_params: Callable[[PRNGKey], Params], optimizer: optax.GradientTransformation):
    """`init(key) -> AgentState` for an agent whose state is its parameters (`init_params(key)`)
    and optimizer."""

    def init(key: PRNGKey) -> AgentState:
        params = init_params(key)
        return AgentState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    return init


def check_step_metrics(names: Any, declared: tuple[str, ...], algorithm: str) -> None:
    """Trace-time guard for a replay agent: the metrics it averages over an update's gradient
    steps (`names`) are exactly its `Algorithm.step_metrics` (`declared`), which metrics rows
    average over gradient steps (`podracer.runner.agent_means`); a per-step metric added
    without declaring it would be diluted by the updates that take no step."""
    names = set(names)
    if names != set(declared):
        raise TypeError(
            f"{algorithm}: the per-step metrics {sorted(names)} differ from the declared step_metrics "
            f"{sorted(declared)}; list every per-step metric in its Algorithm's step_metrics"
        )


def make_sgd_epochs(
    grad_fn: Callable[[Params, Any], tuple[tuple[Array, dict], Any]],
    optimizer: optax.GradientTransformation,
    minibatches: Minibatcher,
    num_epochs: int,
    num_minibatches: int,
    unroll: bool = False,
    prepare_epoch: Callable[[Any], Any] | None = None,
) -> Callable[[Params, Any, Any, PRNGKey], tuple[Params, Any, dict]]:
    """`(params, opt_state, batch, key) -> (params, opt_state, metrics)`: `num_epochs`
    passes over `batch`, each split by `minibatches` into `num_minibatches` with one
    optimizer step apiece. `grad_fn` returns `((loss, metrics), grads)`; the metrics come
    back averaged over all steps. `unroll` unrolls both loops: XLA:CPU runs convolution
    gradients inside a loop body many times slower than outside one (Atari on CPU), at
    the price of a longer compile. `prepare_epoch`, if given, maps an epoch's stacked
    minibatches `[num_minibatches, ...]` before its steps: statistics of every minibatch
    at once (PPO's advantage normalisation, one collective per epoch, not one per step)."""

    def sgd_step(carry, minibatch):
        params, opt_state = carry
        (_, metrics), grads = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        metrics["grad_norm"] = global_norm(grads)
        return (optax.apply_updates(params, updates), opt_state), metrics

    def epoch(carry, key):
        params, opt_state, batch = carry
        epoch_minibatches = minibatches(key, batch, num_minibatches)
        if prepare_epoch is not None:
            epoch_minibatches = prepare_epoch(epoch_minibatches)
        (params, opt_state), metrics = jax.lax.scan(sgd_step, (params, opt_state), epoch_minibatches, unroll=unroll)
        return (params, opt_state, batch), metrics

    def run(params: Params, opt_state: Any, batch: Any, key: PRNGKey):
        (params, opt_state, _), metrics = jax.lax.scan(
            epoch, (params, opt_state, batch), jax.random.split(key, num_epochs), unroll=unroll
        )
        return params, opt_state, jax.tree.map(jnp.mean, metrics)

    return run


def global_norm(grads: Any) -> Array:
    """The L2 norm of all of `grads`, over one flat vector: the same value as
    `optax.tree.norm`, as one reduction instead of one per parameter array (and the same
    computation as a flattened optimizer's clipping, which XLA then computes once)."""
    return optax.tree.norm(ravel_pytree(grads)[0])
