"""Orbax checkpoints of the whole training state (the guard against non-finite values that
keeps a bad state out of them is `podracer.runner.guard`).

A checkpoint holds a runner's complete device state (for Anakin the `RunnerState`:
parameters, optimizer state, RNG keys, environment states) together with the host's
`Progress` counters, written as one orbax step. Orbax writes a step into a temporary
directory and renames it when complete, so a process killed while writing never leaves a
half-written checkpoint as the latest: the previous one stays the latest.

Typed PRNG keys are stored as their raw key data and rewrapped on restore. Restoring places
every array with the sharding of a *target* state built for the current config and mesh
(sharded environments, replicated agent); a checkpoint whose arrays do not match the
target's shapes raises `CheckpointMismatchError`, naming the first leaf that differs; one
damaged after it was written (a truncated or missing file) raises `CheckpointReadError`,
naming its step and the checkpoint a resume would fall back to once it is moved aside.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

import podracer
from podracer.config import ConfigError


class CheckpointMismatchError(ConfigError):
    """A checkpoint that does not fit the config it is restored for."""


class NoCheckpointError(ConfigError):
    """A run directory without any complete checkpoint."""


# What tensorstore's errors say when a checkpoint's files are cut short, emptied or gone.
_DAMAGE = ("OUT_OF_RANGE", "DATA_LOSS", "NOT_FOUND", "Error opening", "Error reading")


class CheckpointReadError(ConfigError):
    """A checkpoint that orbax committed but that can no longer be read (a file truncated,
    emptied or removed after the write: a full disk, a copy cut short)."""


@dataclasses.dataclass(frozen=True)
class Progress:
    """Host counters saved with the device state: enough to continue exactly."""

    updates: int = 0  # updates applied (per seed)
    env_steps: int = 0  # env steps of one seed
    wall_s: float = 0.0  # training wall time so far, over every session of the run
    rows: int = 0  # metrics rows written (lines of metrics.jsonl)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Progress":
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Checkpoints(Protocol):
    """What a runner needs of a checkpointer (`Checkpointer` is one)."""

    def save(self, state: Any, progress: Progress) -> None: ...

    def restore(self, target: Any) -> tuple[Any, Progress]: ...

    def latest_step(self) -> int | None: ...


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(os.path.abspath(run_dir), "checkpoints")


class Checkpointer:
    """Save and restore `(state, Progress)` pairs in `directory`, keeping the newest `keep`.

    The orbax step number is `progress.updates`. Saves are synchronous: when `save`
    returns, the checkpoint is complete on disk. `read_only` opens an existing directory
    to restore from (NoCheckpointError if there is none). `run_config` (a JSON-ready dict,
    `podracer.config.to_dict` of the run's config) is saved beside every checkpoint's
    counters, so that a resume can tell whether the config it continues with is the one
    the checkpoint was written with (`saved_config`).
    """

    def __init__(self, directory: str, keep: int = 3, read_only: bool = False,
                 run_config: dict[str, Any] | None = None):
        import orbax.checkpoint as ocp  # here, not at the top: `import podracer` would take 0.35 s longer

        self._ocp = ocp
        self._run_config = run_config
        self.directory = os.path.abspath(directory)
        if read_only and not os.path.isdir(self.directory):
            raise NoCheckpointError(f"no checkpoint in {self.directory}")
        # Read-only use just never saves (orbax's own read_only mode logs warnings).
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else keep, enable_async_checkpointing=False, create=not read_only,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, state: Any, progress: Progress) -> None:
        """Write `state` and `progress` as step `progress.updates` (no-op if it exists)."""
        if progress.updates in self._manager.all_steps():
            return
        stored = to_storable(state)
        host = {"progress": progress.to_json(), "leaves": leaf_signatures(stored), "version": _version(),
                "devices": jax.device_count(), "processes": jax.process_count()}
        if self._run_config is not None:
            host["config"] = self._run_config
        args = self._ocp.args
        self._manager.save(
            progress.updates,
            args=args.Composite(state=args.StandardSave(stored), host=args.JsonSave(host)),
        )
        self._manager.wait_until_finished()

    def leaf_signatures(self, step: int | None = None) -> dict[str, list[Any]]:
        """`{path: [shape, dtype]}` of every leaf of a checkpoint (the latest by default),
        without its arrays."""
        return self._host(step)["leaves"]

    def progress(self, step: int | None = None) -> Progress:
        """The host counters of a checkpoint (the latest by default), without its arrays."""
        return Progress.from_json(self._host(step)["progress"])

    def saved_config(self, step: int | None = None) -> dict[str, Any] | None:
        """The run config saved with a checkpoint (the latest by default); None for a
        checkpoint written without one."""
        return self._host(step).get("config")

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, Progress]:
        """The checkpointed state, shaped and placed like `target` (same config and mesh)."""
        step = self._step(step)
        host = self._host(step)
        stored_target = to_storable(target)
        _check_host(host, host["leaves"], leaf_signatures(stored_target))
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), stored_target
        )
        args = self._ocp.args
        restored = self._read(step, args.Composite(state=args.StandardRestore(abstract)))
        return from_storable(restored.state, target), Progress.from_json(host["progress"])

    def restore_agent(self, abstract_agent: Any, step: int | None = None) -> tuple[Any, Progress]:
        """Only the `agent` field of a checkpointed state, on one device, whatever mesh
        wrote it. `abstract_agent` gives the shapes (`jax.ShapeDtypeStruct`s; with
        Anakin's leading seed axis)."""
        return self.restore_part(abstract_agent, ("agent",), step)

    def restore_part(self, abstract: Any, path: tuple[str, ...], step: int | None = None) -> tuple[Any, Progress]:
        """The subtree at `path` (e.g. `("agent", "params")`, what evaluation needs) of a
        checkpointed state, on one local device, without reading the rest."""
        step = self._step(step)
        host = self._host(step)
        prefix = "".join(f".{name}" for name in path)
        stored = {f"{prefix}{leaf}": sig for leaf, sig in leaf_signatures(abstract).items()}
        _check_host(host, {k: v for k, v in host["leaves"].items() if k.startswith(prefix)}, stored)
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        item = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract)
        restore_args = jax.tree.map(lambda x: self._ocp.ArrayRestoreArgs(sharding=device), abstract)
        for name in reversed(path):
            item, restore_args = {name: item}, {name: restore_args}
        args = self._ocp.args.PyTreeRestore(item=item, restore_args=restore_args, partial_restore=True)
        restored = self._read(step, self._ocp.args.Composite(state=args)).state
        for name in path:
            restored = restored[name]
        return restored, Progress.from_json(host["progress"])

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _step(self, step: int | None) -> int:
        """`step`, or the latest; NoCheckpointError if there is none, or `step` is not kept
        (naming those that are), rather than a read that fails as if the files were damaged."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise NoCheckpointError(f"no complete checkpoint in {self.directory}")
        elif step not in self.all_steps():
            kept = ", ".join(map(str, sorted(self.all_steps())))
            raise NoCheckpointError(f"{self.directory} holds no checkpoint of update {step} (it keeps updates {kept})")
        return step

    def _host(self, step: int | None) -> dict[str, Any]:
        step = self._step(step)
        return self._read(step, self._ocp.args.Composite(host=self._ocp.args.JsonRestore())).host

    def _read(self, step: int, args: Any) -> Any:
        """`manager.restore(step, args)`; a checkpoint that cannot be read is a
        `CheckpointReadError` naming the step, its directory and what to do."""
        try:
            return self._manager.restore(step, args=args)
        except Exception as raised:  # noqa: BLE001 - classified below, anything else re-raised as it is
            error = _damage(raised)
            if error is None:
                raise  # not the files (a bad target, a wrong argument, device memory): as it is
            earlier = [s for s in self.all_steps() if s < step]
            fallback = (f"if it is damaged, move {os.path.join(self.directory, str(step))} aside to use the "
                        f"checkpoint of update {max(earlier)}" if earlier else "no earlier checkpoint is kept")
            cause = (str(error).strip().splitlines() or [""])[0]
            cause = cause if len(cause) <= 200 else cause[:200] + "..."
            raise CheckpointReadError(
                f"the checkpoint of update {step} in {self.directory} cannot be read ({type(error).__name__}: "
                f"{cause}); {fallback}"
            ) from raised


def _damage(error: BaseException) -> BaseException | None:
    """The error in `error`'s chain that says a checkpoint's files are damaged, or None.
    Orbax wraps tensorstore's error for one array's chunk (`ValueError: NOT_FOUND: chunk
    ... is missing`, `OUT_OF_RANGE`) in a bare `Exception` naming only the array index."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (FileNotFoundError, EOFError, json.JSONDecodeError)):
            return error
        if isinstance(error, ValueError) and any(status in str(error) for status in _DAMAGE):
            return error
        error = error.__cause__
    return None


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_storable(tree: Any) -> Any:
    """Typed PRNG keys replaced by their raw `uint32` key data (orbax stores plain arrays)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def from_storable(stored: Any, target: Any) -> Any:
    """Undo `to_storable`, using `target` to know which leaves were keys, placed like it."""

    def restore_leaf(x: Any, like: Any) -> Any:
        if _is_key(like):
            x = jax.random.wrap_key_data(x, impl=jax.random.key_impl(like))
        return jax.device_put(x, like.sharding) if isinstance(like, jax.Array) else x

    return jax.tree.map(restore_leaf, stored, target)


def leaf_signatures(tree: Any) -> dict[str, list[Any]]:
    """`{path: [shape, dtype]}` for every leaf, to check a checkpoint before reading it."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): [list(np.shape(x)), str(getattr(x, "dtype", None) or np.asarray(x).dtype)]
            for path, x in leaves}


def _version() -> str:
    # Read when called: `podracer/__init__.py` imports this module before it sets `__version__`.
    return podracer.__version__


def _check_host(host: dict[str, Any], saved: dict[str, list[Any]], expected: dict[str, list[Any]]) -> None:
    """`check_signatures`, naming what the checkpoint was written on where it differs from
    this session: the devices and processes (per-device state has an axis of each device's
    share), and the podracer version (another version may shape some state differently,
    e.g. one-hot observations; CHANGELOG.md lists the versions whose checkpoints differ)."""
    try:
        check_signatures(saved, expected)
    except CheckpointMismatchError as error:
        devices, processes = host.get("devices"), host.get("processes")  # absent from older checkpoints
        written_by = host.get("version") or "before 0.2.0"  # a checkpoint without a version record
        notes = ""
        if devices is not None and (devices, processes) != (jax.device_count(), jax.process_count()):
            notes += (f": the checkpoint was written on {_devices(devices, processes)}, this session has "
                      f"{_devices(jax.device_count(), jax.process_count())}; resume on what the run ran on (the "
                      "same --cpu-devices, launch-local -n or processes)")
        if written_by != _version():
            notes += f" (the checkpoint was written by podracer {written_by}, this is podracer {_version()})"
        if not notes:
            raise
        raise CheckpointMismatchError(f"{error}{notes}") from None


def _devices(devices: int, processes: int) -> str:
    return f"{devices} device{'s' * (devices != 1)} ({processes} process{'es' * (processes != 1)})"


def check_signatures(saved: dict[str, list[Any]], expected: dict[str, list[Any]]) -> None:
    """Raise `CheckpointMismatchError` naming the first leaf whose shape or dtype differs."""
    for path, signature in expected.items():
        if path not in saved:
            raise CheckpointMismatchError(f"checkpoint does not match the config: it has no state{path}")
        if list(saved[path]) != list(signature):
            (shape, dtype), (want_shape, want_dtype) = saved[path], signature
            raise CheckpointMismatchError(
                f"checkpoint does not match the config: state{path} is {dtype}{tuple(shape)} in the "
                f"checkpoint but {want_dtype}{tuple(want_shape)} for this config"
            )
    extra = sorted(set(saved) - set(expected))
    if extra:
        raise CheckpointMismatchError(f"checkpoint does not match the config: unexpected state{extra[0]}")

