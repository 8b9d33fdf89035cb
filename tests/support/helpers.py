"""Shared test helpers: random trajectories, tree comparisons, reference returns, NaN
injection, the tiny lifecycle run, and running the command line (in process or as a
subprocess) and reading what it wrote."""

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp

from podracer.types import Agent, Trajectory


def refuse_import(monkeypatch, package: str) -> None:
    """Make `import package` (and its submodules) raise ImportError for the rest of the
    test, whether or not it is installed: an optional extra seen as missing."""
    import builtins

    real_import = builtins.__import__

    def refusing(name, *args, **kwargs):
        if name == package or name.startswith(package + "."):
            raise ImportError(f"No module named '{package}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refusing)


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

    def poison(state, metrics):
        if failed_at is not None:
            failed_at.append(time.monotonic())
        return state, {**metrics, "loss": np.float32(np.nan)}

    return _poisoned_at(make_update_step, call, poison)


def nan_params_at(make_update_step, call: int):
    """A stand-in for `sebulba.learner.make_update_step` whose `call`-th update returns NaN
    parameters with finite metrics (a silent blow-up): for the learner's parameter guard."""
    nans = jax.jit(lambda params: jax.tree.map(lambda p: jnp.full_like(p, jnp.nan), params))
    return _poisoned_at(make_update_step, call, lambda state, metrics: (state.replace(params=nans(state.params)),
                                                                         metrics))


def _poisoned_at(make_update_step, call: int, poison):
    """`make_update_step` whose update steps pass through `poison(state, metrics)` on the
    `call`-th call only."""

    def poisoned(agent, mesh):
        update_step, calls = make_update_step(agent, mesh), []

        def step(state, trajectories, keys):
            state, metrics = update_step(state, trajectories, keys)
            calls.append(1)
            if len(calls) == call:
                state, metrics = poison(state, metrics)
            return state, metrics

        return step

    return poisoned


def assert_solved_for_a_stretch(rows, threshold: float, stretch: int = 4, end_floor: float = 100.0) -> None:
    """A run that learned, not one lucky row: some `stretch` consecutive metrics rows average
    a mean episode return of at least `threshold`, and the last row is still at least
    `end_floor`. For PPO on CartPole with CleanRL's settings, which can lose part of a solved
    policy late in a run (the final rows depend on float rounding: the same run compiled
    differently ends anywhere from 230 to 500)."""
    import numpy as np

    returns = [row["episode_return"] for row in rows]
    windows = [np.mean(returns[i:i + stretch]) for i in range(len(returns) - stretch + 1)
               if None not in returns[i:i + stretch]]
    assert windows and max(windows) >= threshold and returns[-1] >= end_floor, returns


# The tiny lifecycle run: 14 updates of 8 envs x 16 steps, 3 updates per host call, a
# checkpoint every 4 updates (test_lifecycle, test_lifecycle_cli and test_cli share its
# compiled programs through the compilation cache).
def _tiny_config():
    from anakin import AnakinConfig
    from podracer.agents import PPOConfig
    from podracer.config import CheckpointConfig, Config, EnvConfig, LogConfig

    return Config(
        env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2), total_env_steps=8 * 16 * 14,
        arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=3, num_seeds=2),
        log=LogConfig(console=False, tensorboard=False), checkpoint=CheckpointConfig(every_updates=4, keep=2),
    )


TINY = _tiny_config()
# `ppo-catch-anakin` overridden into `TINY` (so the programs come from the compilation
# cache filled by test_lifecycle).
TINY_ARGS = ["ppo-catch-anakin", "--agent.learning-rate", 2.5e-4, "--agent.num-minibatches", 2,
             "--agent.anneal-lr", "true", "--agent.activation", "tanh",
             "--arch.num-envs", 8, "--arch.rollout-length", 16, "--arch.updates-per-call", 3, "--arch.num-seeds", 2,
             "--total-env-steps", TINY.total_env_steps, "--log.console", "false", "--log.tensorboard", "false"]
TIMING = ("sps", "wall_s")


def comparable(rows: list[dict]) -> list[dict]:
    """Metrics rows without their timings, which no two runs share."""
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


# The command line and its run directories.

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def subprocess_env(cpu_devices: int | None = None) -> dict[str, str]:
    """The environment of a test's Python subprocess (`python -m experiments.cli ...`): this
    checkout on PYTHONPATH (not an installed copy), JAX on the CPU, and `cpu_devices` fake
    CPU devices (None: XLA_FLAGS unset, so one device unless the command says
    `--cpu-devices`). conftest's compilation cache and fast-compile flags are inherited."""
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    flags = [f for f in env.pop("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if cpu_devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={cpu_devices}")
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def run_main(capsys, *argv):
    """`podracer ARGV...` in this process: `(exit status, captured stdout/stderr)`, the
    status 0 when `main` returns."""
    from experiments.cli import main

    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr()


def assert_one_line_error(code, out, *fragments: str) -> str:
    """The command line's contract for a user error: exit status 2 and one line on stderr,
    `podracer: error: ...` holding each of `fragments`, no traceback. Returns that line."""
    assert code == 2, out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podracer: error: ") and "Traceback" not in out.err, out.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def read_rows(run_dir, missing_ok: bool = False) -> list[dict]:
    """A run directory's metrics rows (`metrics.jsonl`); `[]` if it has none yet and
    `missing_ok`."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if missing_ok and not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines()]


def assert_buffers_per_device_and_params_replicated(state, held: int) -> None:
    """A learner state on 3 devices: each device's replay buffer (`state.local`) holds its
    own data in its first `held` slots, and every parameter is the same on every device."""
    import jax
    import numpy as np

    obs = state.local.experience.obs
    shards = sorted(obs.addressable_shards, key=lambda shard: shard.index[0].start)
    first = [np.asarray(shard.data)[0, 0, :held] for shard in shards]
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    for leaf in jax.tree.leaves(state.params):
        copy = np.asarray(leaf.addressable_shards[0].data)
        for shard in leaf.addressable_shards[1:]:
            np.testing.assert_array_equal(np.asarray(shard.data), copy)


def remove_chunks(state_dir, select) -> list[str]:
    """Remove from a committed orbax checkpoint's array store (`<step>/state`, an OCDBT
    database) the chunks whose keys `select` accepts, e.g. `envs.obs/0.3.0.0`, the part of
    an array sharded over 4 devices that the 4th holds: a checkpoint damaged in only the
    shards that one process of a multi-process run reads. Returns the removed keys."""
    import tensorstore as ts

    store = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{os.path.abspath(state_dir)}/"}).result()
    removed = [key.decode() for key in store.list().result() if select(key.decode())]
    for key in removed:
        store.delete_range(ts.KvStore.KeyRange(key, key + "\x00")).result()
    assert removed, "no chunk matched"
    return removed


@dataclasses.dataclass(frozen=True)
class WideOptions:
    """The options of a registered torso in the tests (`register_torso`): one width, checked."""

    width: int = 16

    def __post_init__(self):
        if self.width < 1:
            raise ValueError(f"width must be >= 1, got {self.width}")
