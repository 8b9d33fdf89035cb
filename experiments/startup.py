"""The start of a run: every process agrees on the config and the run directory before
anything compiles, or every process stops with the same one-line error.

Each step is an all-gather through the coordination service's key-value store
(`podracer.distributed.exchange`, with a deadline), not an XLA collective: a process that
fails a step tells the others why instead of leaving them in a collective. With one
process the steps just run locally.

1. config: every process's resolved config, but for `run_dir` and the process's own
   `distributed.process_id` and `coordinator` spelling, must equal process 0's (compared
   by hash; the error names the first field that differs), and either every process
   resumes the run (`--resume`) or none does.
2. run_dir: process 0 decides it (given, or the default `runs/<preset>-<time>`) and the
   others receive it; a process given another `--run-dir` is an error naming both.
3. setup: the runner's checks (devices, sizes, environment) pass on every process.
4. storage: process 0 writes the run directory and a marker file in it; every other
   process must see the marker: checkpoints and metrics of a multi-process run live in
   one directory on storage that every process can see (orbax writes each process's
   shards of a checkpoint there and process 0 commits it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import uuid
from typing import Any, Callable

from podracer import config as config_lib
from podracer import distributed
from podracer.config import Config, ConfigError


class StartupError(ConfigError):
    """A start-up step that failed on every process at once: each process computes it from
    the same gathered values and raises it, so none needs telling (unlike a failure of one
    process later, which `distributed.announce_failure` tells the others)."""


MARKER_PREFIX = ".podracer-marker-"
MARKER_WAIT_S = 10.0  # how long a process looks for process 0's marker (file systems cache lookups)
PROCESS_SPECIFIC = ("run_dir", "distributed.process_id", "distributed.coordinator")


def gather(step: str, value: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    """Every process's `value` for start-up step `step`; raises the first `error` any of
    them reports (this process's own first), as a StartupError on every process."""
    if distributed.process_count() == 1:
        values = [value]
    else:
        values = distributed.exchange(f"the start-up step '{step}'", value, timeout_s)
    me = distributed.process_id()
    if value.get("error"):
        raise StartupError(value["error"])
    for other, theirs in enumerate(values):
        if other != me and theirs.get("error"):
            raise StartupError(f"process {other}: {theirs['error']}")
    return values


def attempt(check: Callable[[], Any]) -> tuple[Any, str | None]:
    """`(result, None)`, or `(None, message)` when `check` raises ConfigError."""
    try:
        return check(), None
    except ConfigError as error:
        return None, str(error)


def comparable(config: Config) -> dict[str, Any]:
    """The config as a dict without what may differ between the processes of one run."""
    data = config_lib.to_dict(config)
    for path in PROCESS_SPECIFIC:
        *parents, name = path.split(".")
        section = data
        for parent in parents:
            section = section[parent]
        section.pop(name, None)
    return data


def fingerprint(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """`(dotted path, a's value, b's value)` of the first field where two config dicts
    differ (a section's `_type` names the section's class), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for name in list(a) + [n for n in b if n not in a]:
            where = name if not path else (path if name == "_type" else f"{path}.{name}")
            found = first_difference(a.get(name), b.get(name), where)
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def check_same_session(values: list[dict[str, Any]]) -> None:
    """StartupError unless every process resumes, or every process starts a new run: one
    given `--resume` and another a preset would go separate ways (one restoring a checkpoint
    while the other starts afresh) and meet only at a wait's deadline."""
    for other, theirs in enumerate(values[1:], start=1):
        if theirs["resume"] != values[0]["resume"]:
            says = {True: "resumes the run (--resume)", False: "starts a new run (a preset)"}
            raise StartupError(f"process {other} {says[theirs['resume']]} but process 0 {says[values[0]['resume']]}: "
                               "give every process the same command")


def check_same_config(values: list[dict[str, Any]]) -> None:
    """StartupError naming the first process and field that differ from process 0."""
    reference = values[0]
    for other, theirs in enumerate(values[1:], start=1):
        if theirs["hash"] == reference["hash"]:
            continue
        path, ours, different = first_difference(reference["config"], theirs["config"]) or ("config", "?", "?")
        raise StartupError(f"process {other} has {path}={different!r} but process 0 has {path}={ours!r}: every "
                           "process of a run needs the same preset and overrides")


def agreed_run_dir(values: list[dict[str, Any]]) -> str:
    """Process 0's run directory; StartupError if another process was given a different one."""
    leader = values[0]["run_dir"]
    for other, theirs in enumerate(values[1:], start=1):
        given = theirs["run_dir"]
        if given is not None and os.path.normpath(given) != os.path.normpath(leader):
            raise StartupError(f"process {other} has run_dir {given!r} but process 0 has {leader!r}: every process "
                               "of a run uses one run directory (give every process the same --run-dir, or give "
                               "none and process 0 picks it)")
    return leader


def agree_on_config(config: Config, run_dir: str | None, error: str | None, timeout_s: float,
                    resume: bool = False) -> Config:
    """Step 1 and 2: the config every process agrees on, with process 0's `run_dir`
    (`run_dir` is what this process was given, or process 0's choice). `resume`: this
    process continues the run in `run_dir` (`--resume`) rather than starting one."""
    data = comparable(config)
    values = gather("config", {"config": data, "hash": fingerprint(data), "run_dir": run_dir, "error": error,
                               "resume": resume}, timeout_s)
    check_same_session(values)
    check_same_config(values)
    return dataclasses.replace(config, run_dir=agreed_run_dir(values))


def check_shared_storage(run_dir: str, prepare: Callable[[], None], timeout_s: float) -> None:
    """Step 4: process 0 runs `prepare` (creates the run directory) and writes a marker
    there; StartupError on every process if one of them cannot see it."""
    leader, multiprocess = distributed.is_leader(), distributed.process_count() > 1
    marker = os.path.join(run_dir, MARKER_PREFIX + uuid.uuid4().hex)
    error = None
    if leader:
        _, error = attempt(prepare)
        if error is None and multiprocess:
            _, error = attempt(lambda: _write_marker(marker))
    if not multiprocess:
        if error:
            raise StartupError(error)
        return
    name = gather("run directory", {"marker": os.path.basename(marker), "error": error}, timeout_s)[0]["marker"]
    seen = leader or _appears(os.path.join(run_dir, name), min(MARKER_WAIT_S, timeout_s))
    values = gather("shared storage", {"seen": seen}, timeout_s)
    if leader:
        os.remove(marker)
    blind = [other for other, value in enumerate(values) if not value["seen"]]
    if blind:
        names = ", ".join(map(str, blind))
        raise StartupError(f"run_dir {run_dir!r} is not on storage every process can see: process {names} cannot see "
                           "the files process 0 writes there; a multi-process run keeps its checkpoints in one "
                           "directory on a shared file system (the same path on every host)")


def _write_marker(path: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write("written by process 0 to check that every process sees this directory\n")
    except OSError as error:
        raise ConfigError(f"run_dir {os.path.dirname(path)!r} is not writable: {error.strerror or error}") from None


def _appears(path: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def check_same_checkpoint(values: list[dict[str, Any]], run_dir: str) -> None:
    """A resumed run restores one checkpoint: StartupError unless every process found the
    same latest one in `run_dir`."""
    for other, theirs in enumerate(values[1:], start=1):
        if theirs["updates"] != values[0]["updates"]:
            raise StartupError(f"process {other} finds the checkpoint of update {theirs['updates']} latest in "
                               f"{run_dir!r} but process 0 finds update {values[0]['updates']}: the processes do not "
                               "see the same run directory")
