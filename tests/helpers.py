"""Shared test helpers: random trajectories and small configs."""

import functools

import jax
import jax.numpy as jnp

from podracer.types import Agent, Trajectory


def random_trajectory(agent: Agent, params, key, T: int, B: int, obs_dim: int, num_actions: int) -> Trajectory:
    """A `[T, B]` trajectory with episode ends of both kinds, extras from `agent.act`.
    Jitted: eagerly, each of its ops would compile on its own."""
    return _random_trajectory(agent.act, params, key, T, B, obs_dim)


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _random_trajectory(act, params, key, T: int, B: int, obs_dim: int) -> Trajectory:
    keys = jax.random.split(key, 6)
    obs = jax.random.normal(keys[0], (T, B, obs_dim))
    next_obs = jax.random.normal(keys[1], (T, B, obs_dim))
    action, extras = jax.vmap(act, in_axes=(None, 0, 0))(params, obs, jax.random.split(keys[2], T))
    reward = jax.random.normal(keys[3], (T, B))
    terminated = jax.random.bernoulli(keys[4], 0.1, (T, B))
    truncated = jax.random.bernoulli(keys[5], 0.05, (T, B)) & ~terminated
    return Trajectory(obs, action, reward, terminated, truncated, next_obs, extras)


def assert_trees_equal(actual, expected, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Assert two pytrees are the same: the same structure (node types, keys, field names
    and where `None`s are), then leaf by leaf the same shape, the same dtype and the same
    values (exactly by default, or within `rtol`/`atol`; NaNs match NaNs). Typed PRNG keys
    compare by their key data. The error names the first leaf that differs.

    The one tree comparison of the suite: zipping `jax.tree.leaves` instead would pass on
    an empty side, on two trees of different layout, and on arrays that only broadcast."""
    import numpy as np

    expected_leaves, expected_def = jax.tree_util.tree_flatten_with_path(expected)
    actual_leaves, actual_def = jax.tree_util.tree_flatten_with_path(actual)
    if actual_def != expected_def:
        raise AssertionError(f"tree structures differ:\n  actual:   {actual_def}\n  expected: {expected_def}")
    for (path, x), (_, y) in zip(actual_leaves, expected_leaves):
        where = jax.tree_util.keystr(path) or "the root"
        (x, x_dtype), (y, y_dtype) = _comparable(x), _comparable(y)
        if x.shape != y.shape or x_dtype != y_dtype:
            raise AssertionError(f"leaf {where} is {x_dtype}{x.shape}, expected {y_dtype}{y.shape}")
        if rtol == 0 and atol == 0:
            np.testing.assert_array_equal(x, y, err_msg=f"leaf {where}", strict=True)
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"leaf {where}", strict=True)


def _comparable(x):
    """`(NumPy array, dtype name)` of a leaf; a typed PRNG key as its key data and its
    key type (`key<fry>`)."""
    import numpy as np

    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x)), str(x.dtype)
    x = np.asarray(x)
    return x, str(x.dtype)


def tree_allclose(actual, expected, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """`assert_trees_equal` within float tolerances (the same checks of structure, shapes
    and dtypes)."""
    assert_trees_equal(actual, expected, rtol=rtol, atol=atol)


def episodes(end) -> list[slice]:
    """The episodes of a `[T]` trajectory, as slices: each ends where `end` is set, the
    last one with the trajectory (where a learner bootstraps too)."""
    import numpy as np

    lasts = sorted(set(np.flatnonzero(np.asarray(end)).tolist()) | {len(end) - 1})
    return [slice(first, last + 1) for first, last in zip([0] + [k + 1 for k in lasts[:-1]], lasts)]


def gae_episode_by_episode(r, discount, v_tm1, v_t, lambda_, end):
    """rlax's GAE on each episode of a `[T]` trajectory alone (the oracle for ours): its
    `values` are the episode's `v_tm1` and then the `v_t` of its last step, V(final obs)."""
    import numpy as np

    advantages = np.zeros(len(r), np.float32)
    for part in episodes(end):
        values = np.append(v_tm1[part], v_t[part][-1])
        advantages[part] = _front_padded(_rlax_gae, len(r), r[part], discount[part], values, lambda_=lambda_)
    return advantages


def vtrace_episode_by_episode(r, discount, v_tm1, v_t, rho, lambda_, end, clip_rho=1.0, clip_pg_rho=1.0):
    """rlax's V-trace on each episode of a `[T]` trajectory alone: `(errors, pg_advantage)`,
    each `[T]`."""
    import numpy as np

    errors, pg_advantage = np.zeros(len(r), np.float32), np.zeros(len(r), np.float32)
    for part in episodes(end):
        errors[part], pg_advantage[part] = _front_padded(
            _rlax_vtrace, len(r), v_tm1[part], v_t[part], r[part], discount[part], rho[part],
            lambda_=lambda_, clip_rho=clip_rho, clip_pg_rho=clip_pg_rho)
    return errors, pg_advantage


def _front_padded(fn, length: int, *arrays, **kwargs):
    """`fn(*arrays)` computed on arrays zero-padded at the front to `length` (`values` one
    longer), then cut back: one compile for every episode length. Sound for backward
    recursions such as GAE and V-trace, where no step depends on the steps before it."""
    import numpy as np

    pad = length - len(arrays[0])
    padded = [np.concatenate([np.zeros(pad, np.float32), np.asarray(a, np.float32)]) for a in arrays]
    out = fn(*padded, **kwargs)
    return tuple(np.asarray(x)[pad:] for x in out) if isinstance(out, tuple) else np.asarray(out)[pad:]


@functools.partial(jax.jit, static_argnames=("lambda_",))
def _rlax_gae(r, discount, values, lambda_):
    import rlax

    return rlax.truncated_generalized_advantage_estimation(r, discount, lambda_, values)


@functools.partial(jax.jit, static_argnames=("lambda_", "clip_rho", "clip_pg_rho"))
def _rlax_vtrace(v_tm1, v_t, r, discount, rho, lambda_, clip_rho, clip_pg_rho):
    import rlax

    out = rlax.vtrace_td_error_and_advantage(v_tm1, v_t, r, discount, rho, lambda_, clip_rho, clip_pg_rho)
    return out.errors, out.pg_advantage


def leading_axis(x):
    return jnp.expand_dims(x, 0)


def nan_loss_at(make_update_step, call: int, failed_at: list | None = None):
    """A stand-in for `sebulba.learner.make_update_step` whose `call`-th update reports a
    NaN loss (appending the time to `failed_at`): for NaN-guard tests."""
    import time

    import numpy as np

    def poisoned(agent, mesh):
        update_step, calls = make_update_step(agent, mesh), []

        def step(state, trajectories, keys):
            state, metrics = update_step(state, trajectories, keys)
            calls.append(1)
            if len(calls) == call:
                if failed_at is not None:
                    failed_at.append(time.monotonic())
                metrics = {**metrics, "loss": np.float32(np.nan)}
            return state, metrics

        return step

    return poisoned


def nan_params_at(make_update_step, call: int):
    """A stand-in for `sebulba.learner.make_update_step` whose `call`-th update returns NaN
    parameters with finite metrics (a silent blow-up): for the learner's parameter guard."""
    poison = jax.jit(lambda params: jax.tree.map(lambda p: jnp.full_like(p, jnp.nan), params))

    def poisoned(agent, mesh):
        update_step, calls = make_update_step(agent, mesh), []

        def step(state, trajectories, keys):
            state, metrics = update_step(state, trajectories, keys)
            calls.append(1)
            if len(calls) == call:
                state = state.replace(params=poison(state.params))
            return state, metrics

        return step

    return poisoned


def assert_sustained(rows, threshold: float, floor: float, last: int = 4) -> None:
    """A run that ends learned, not one lucky row: the metrics rows' mean episode returns
    over the last `last` rows average at least `threshold`, and none is below `floor`."""
    import numpy as np

    returns = [row["episode_return"] for row in rows]
    tail = returns[-last:]
    assert len(tail) == last and None not in tail, returns
    assert np.mean(tail) >= threshold and min(tail) >= floor, returns
