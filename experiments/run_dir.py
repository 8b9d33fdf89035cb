"""A run directory: its resolved config (`config.json`), what its rewards depend on beyond
the config (`environment.json`), and the checks a resume makes against them: the same
rewards on this installation, and the same config as the checkpoint's outside the fields a
session may change.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

from anakin.config import AnakinConfig
from podracer import config as config_lib
from podracer.agents import registry
from podracer.checkpoint import Checkpointer, NoCheckpointError, Progress, checkpoint_dir
from podracer.config import Config, ConfigError
from podracer.envs.host import host_env_record
from sebulba.config import SebulbaConfig

ENV_RECORD = "environment.json"  # what the rewards depend on beyond the config (`host_env_record`)


def config_types() -> list[type]:
    """Config classes a saved config.json may name: every registered algorithm's config and
    every architecture's."""
    archs = (AnakinConfig, SebulbaConfig)
    return sorted({*registry.config_classes(), *archs}, key=lambda cls: cls.__name__)


def load_run_config(run_dir: str) -> Config:
    """The resolved config a run directory was written with (its `config.json`)."""
    path = os.path.join(run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{run_dir!r} is not a run directory (no config.json)") from None
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    return config_lib.from_dict(data, config_types())


def default_run_dir(name: str, root: str = "runs") -> str:
    """`root/<name>-<time>`, or with `-2`, `-3`, ... where that exists already (a run
    started in the same second)."""
    base = os.path.join(root, f"{name}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    path, attempt = base, 1
    while os.path.exists(path):
        attempt += 1
        path = f"{base}-{attempt}"
    return path


def prepare_run_dir(run_dir: str, config: Config, defaulted: bool = False) -> None:
    """Create `run_dir` and write the resolved config; ConfigError if it is not writable, or
    if it already holds a run's checkpoints (a new run there would be mixed with the old one's
    checkpoints, and a later resume could continue the old run under the new config). A
    `defaulted` directory (`default_run_dir`) must be new: its config is created exclusively,
    so two runs started in the same second never share one."""
    checkpoints = checkpoint_dir(run_dir)
    try:
        if os.path.isdir(checkpoints) and any(name.isdigit() for name in os.listdir(checkpoints)):
            raise ConfigError(f"run_dir {run_dir!r} already holds a run with checkpoints; continue it with "
                              f"`podracer train --resume {run_dir}`, or choose another run_dir")
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "config.json"), "x" if defaulted else "w", encoding="utf-8") as f:
            json.dump(config_lib.to_dict(config), f, indent=2)
        record = host_env_record(config.env)
        if record is not None:
            with open(os.path.join(run_dir, ENV_RECORD), "w", encoding="utf-8") as f:
                json.dump(record, f, indent=2)
    except FileExistsError:
        raise ConfigError(f"run_dir {run_dir!r} was taken by another run started at the same moment; "
                          "give each run its own --run-dir") from None
    except OSError as error:
        raise ConfigError(f"run_dir {run_dir!r} is not writable: {error.strerror or error}") from None


def check_env_record(run_dir: str, config: Config) -> None:
    """ConfigError unless this installation computes the run's rewards as the one that
    trained it: `RUN_DIR/environment.json` (absent where the rewards depend on the config
    alone) equals `host_env_record(config.env)` here.

    Args:
        run_dir: the run being resumed.
        config: its saved config.
    """
    path = os.path.join(run_dir, ENV_RECORD)
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except FileNotFoundError:
        saved = None
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} cannot be read: {error}") from None
    record = host_env_record(config.env)
    if saved != record:
        raise ConfigError(f"{run_dir!r} was trained with {json.dumps(saved)} ({ENV_RECORD}), and this installation "
                          f"has {json.dumps(record)}: its rewards would differ; resume it where they are the same")


def latest_progress(run_dir: str, config: Config | None = None) -> Progress:
    """The host counters of the latest complete checkpoint in `run_dir`; with `config`, a
    ConfigError if that is not the config the checkpoint was written with (`check_same_run`)."""
    with Checkpointer(checkpoint_dir(run_dir), read_only=True) as checkpoints:
        if checkpoints.latest_step() is None:
            raise NoCheckpointError(f"no checkpoint to resume from in {os.path.join(run_dir, 'checkpoints')}")
        progress = checkpoints.progress()
        if config is not None:
            check_same_run(config, checkpoints.saved_config(), progress.updates)
        return progress


# What a resumed session may change (fields, or whole sections): where the run is, how this
# session's processes meet, what it logs and how it checkpoints, which devices it runs on
# (their number is checked with the arrays), how often it reports; none changes the numbers
# a run computes. And the budget, to train a run longer (a schedule over it then follows).
SESSION_FIELDS = ("run_dir", "distributed", "log", "checkpoint", "total_env_steps", "arch.devices",
                  "arch.actor_devices", "arch.learner_devices", "arch.updates_per_call", "arch.updates_per_log",
                  "arch.env_threads", "arch.layout")


def check_same_run(config: Config, saved: dict[str, Any] | None, updates: int) -> None:
    """ConfigError naming the first field (outside `SESSION_FIELDS`) where `config` differs
    from `saved`, the config its checkpoint was written with: an edited config.json (another
    seed, learning rate or network) would continue the run as neither the old run nor a new
    one. A checkpoint saved without a config is not checked."""
    if saved is None:
        return
    saved = json.loads(json.dumps(config_lib.upgrade_dict(saved)))
    current = json.loads(json.dumps(config_lib.to_dict(config)))
    for name in sorted(saved):
        path = _first_difference(saved[name], current.get(name), name)
        if path is not None:
            field, was, now = path
            raise ConfigError(
                f"config.json differs from the config the checkpoint of update {updates} was written with: {field} is "
                f"{now!r} but was {was!r}; a resume continues the run with its own config (put {field} back, or start "
                f"a new run from this one with --checkpoint.init-from)"
            )


def _first_difference(was: Any, now: Any, path: str) -> tuple[str, Any, Any] | None:
    """`(dotted field, saved value, current value)` of the first difference, or None. A
    field the saved config lacks (one added by a later podracer, at its default) is none."""
    if path in SESSION_FIELDS:
        return None
    if isinstance(was, dict) and isinstance(now, dict):
        for key in sorted(was):
            found = _first_difference(was.get(key), now.get(key), f"{path}.{key}" if key != "_type" else path)
            if found is not None:
                return found
        return None
    return None if was == now else (path, was, now)
