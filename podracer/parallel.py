"""Meshes, data placement and cross-device averaging (JAX 0.10, `jax.shard_map`).

Gradient averaging, done once, here. Under `shard_map(check_vma=True)` parameters that
enter replicated are *device-invariant*; differentiating a per-device loss with respect
to them already sums the gradient over the mesh (the transpose of the implicit broadcast),
and a `pmean` on top leaves that N-times-too-large sum unchanged. `value_and_mean_grad`
casts the parameters to device-varying first, so the gradient is the local one, and then
averages it with `lax.pmean`: the pmap data-parallel model. `tests/core/test_parallel.py`
checks that N devices give the gradient of the same global batch on one.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AxisName = str | tuple[str, ...] | None


def make_mesh(devices: Sequence[jax.Device], axis_name: str = "device") -> Mesh:
    """A 1-D mesh over `devices` with one named data-parallel axis."""
    return Mesh(np.asarray(devices), (axis_name,))


def shard(tree: Any, mesh: Mesh, spec: P) -> Any:
    """Place every leaf of `tree` on `mesh` with partition `spec`.

    With several processes the mesh spans devices this process cannot address; every
    process then passes the same host values and each places the shards it owns.
    """
    sharding = NamedSharding(mesh, spec)
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)

    def place(x: Any) -> jax.Array:
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            data = place(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(place, tree)


def replicate(tree: Any, mesh: Mesh) -> Any:
    return shard(tree, mesh, P())


def put_process_batch(tree: Any, sharding: NamedSharding, axis: int = 1) -> Any:
    """Place this process's part of a batch on `sharding`, split along `axis`.

    With one process `tree` is the whole batch. With several, each process passes its own
    `[..., B_local, ...]` part (the same `B_local` everywhere) and gets its slice of one
    global `[..., B_local * processes, ...]` array; the mesh must list each process's
    devices together, in process order (as `jax.devices()` does).
    """
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)
    processes = jax.process_count()

    def place(x: Any) -> jax.Array:
        host = np.asarray(x)
        shape = host.shape[:axis] + (host.shape[axis] * processes,) + host.shape[axis + 1:]
        return jax.make_array_from_process_local_data(sharding, host, shape)

    return jax.tree.map(place, tree)


def local_copy(tree: Any) -> Any:
    """Each leaf's first shard this process holds: for a replicated array, its full value
    on one local device, whatever devices of other processes it also spans."""
    return jax.tree.map(lambda x: x.addressable_data(0), tree)


def spans_processes(mesh: Mesh) -> bool:
    """Whether `mesh` has devices of other processes (its collectives cross processes)."""
    return not NamedSharding(mesh, P()).is_fully_addressable


def process_sum(values: np.ndarray, mesh: Mesh) -> np.ndarray:
    """The sum over processes of every process's `values` (host arrays of one shape), through
    a collective over `mesh`; `values` itself with one process. Every process must call it
    at the same point of the run (it is a collective), and not while another program with
    collectives over `mesh` may still run: collectives of programs in flight together pair
    up differently in different processes."""
    values = np.asarray(values)
    if not spans_processes(mesh):
        return values
    here = jax.process_index()
    local = np.zeros((sum(d.process_index == here for d in mesh.devices.flat),) + values.shape, values.dtype)
    local[0] = values
    axis = mesh.axis_names[0]
    stacked = jax.make_array_from_process_local_data(NamedSharding(mesh, P(axis)), local)
    return np.asarray(_sum_over_devices(mesh)(stacked))


@functools.lru_cache(maxsize=None)
def _sum_over_devices(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    return jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=NamedSharding(mesh, P()))


def pmean(tree: Any, axis_name: AxisName) -> Any:
    """`lax.pmean` over `axis_name`, or the identity when there is no axis."""
    return tree if axis_name is None else jax.lax.pmean(tree, axis_name)


def pmean_flat(tree: Any, axis_name: AxisName) -> Any:
    """`pmean` of a pytree as one all-reduce of one flat vector: across processes each
    collective pays a network round trip, so one beats one per leaf."""
    if axis_name is None:
        return tree
    flat, unravel = ravel_pytree(tree)
    return unravel(jax.lax.pmean(flat, axis_name))


def value_and_mean_grad(
    fn: Callable[..., Any], axis_name: AxisName, has_aux: bool = False
) -> Callable[..., tuple[Any, Any]]:
    """`jax.value_and_grad(fn)` whose gradient is averaged over the mesh axis.

    Use it inside `shard_map` (any `check_vma`) or outside (axis_name=None). The value is
    the local one; average it yourself if you log it.
    """
    value_and_grad = jax.value_and_grad(fn, has_aux=has_aux)
    if axis_name is None:
        return value_and_grad

    def wrapped(params: Any, *args: Any) -> tuple[Any, Any]:
        params = to_varying(params, axis_name)
        value, grads = value_and_grad(params, *args)
        return value, pmean_flat(grads, axis_name)

    return wrapped


def to_varying(tree: Any, axis_name: AxisName) -> Any:
    """Mark device-invariant leaves as device-varying (no-op for varying ones)."""
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)

    def cast(x: Any) -> Any:
        missing = tuple(n for n in names if n not in jax.typeof(x).manual_axis_type.varying)
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)


def without_vma_check(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` for use inside `shard_map(check_vma=True)` when it cannot be typed there: its
    loops start from constants (device-invariant) and carry device-varying values, which
    `check_vma` rejects ("while_loop body function carry input and carry output must have
    equal types"); mctx's search is such code, and it is not ours to annotate.

    Inside a `shard_map`, `fn` runs in a nested `shard_map` over no new axes with
    `check_vma=False`, and its outputs are marked device-varying over the manual axes (they
    may depend on varying inputs; typing them invariant would make a later `pmean` wrong).
    Outside any `shard_map` it is `fn` itself. No collectives inside `fn`.
    """

    def wrapped(*args: Any) -> Any:
        mesh = jax.sharding.get_abstract_mesh()
        manual = tuple(name for name in mesh.axis_names if name in mesh.manual_axes) if not mesh.empty else ()
        if not manual:
            return fn(*args)
        inner = jax.shard_map(fn, mesh=mesh, in_specs=tuple(P() for _ in args), out_specs=P(),
                              axis_names=frozenset(), check_vma=False)
        return to_varying(inner(*args), manual)

    return wrapped
