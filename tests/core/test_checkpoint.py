"""Checkpoints: round trip onto a mesh, keys, keep-last-K, killed writes, config round trip."""

import json
import os
import random
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from experiments.presets import all_presets
from experiments.run_dir import config_types
from podracer import config as config_lib
from podracer import parallel
from podracer.checkpoint import (
    Checkpointer,
    CheckpointMismatchError,
    CheckpointReadError,
    NoCheckpointError,
    Progress,
)
from tests.support.checkpoint_writer import state_for
from tests.support.helpers import REPO, assert_trees_equal, remove_chunks, subprocess_env


def sharded_state(mesh, value):
    keys = jax.random.split(jax.random.key(value), 4).reshape(1, 4)
    agent = {"w": jnp.full((3, 2), float(value)) + jnp.arange(6.0).reshape(3, 2), "count": jnp.int32(value),
             "opt": (jnp.full((2,), -float(value)), {"mu": jnp.arange(3.0) * value})}
    return {
        "agent": parallel.replicate(agent, mesh),
        "envs": parallel.shard(jnp.arange(8.0).reshape(1, 8) + value, mesh, P(None, "device")),
        "key": parallel.shard(keys, mesh, P(None, "device")),
    }


def test_round_trip_onto_mesh_shardings_and_keep_last(tmp_path):
    mesh = parallel.make_mesh(jax.devices()[:4], "device")
    with Checkpointer(str(tmp_path), keep=2) as checkpoints:
        for step in (1, 2, 3):
            checkpoints.save(sharded_state(mesh, step), Progress(updates=step, env_steps=10 * step, rows=step))
        assert checkpoints.all_steps() == [2, 3]
        target = sharded_state(mesh, 0)
        restored, progress = checkpoints.restore(target)
    assert progress == Progress(updates=3, env_steps=30, rows=3)
    # Every value of the newest step (agent, environments, keys as typed keys), placed like the target.
    assert_trees_equal(restored, sharded_state(mesh, 3))
    for name in ("agent", "envs", "key"):
        assert jax.tree.leaves(restored[name])[0].sharding == jax.tree.leaves(target[name])[0].sharding


def test_mismatched_shapes_name_the_leaf_and_empty_dirs_say_so(tmp_path):
    mesh = parallel.make_mesh(jax.devices()[:4], "device")
    with Checkpointer(str(tmp_path / "a")) as checkpoints:
        checkpoints.save(sharded_state(mesh, 1), Progress(updates=1))
        target = sharded_state(mesh, 0)
        target["agent"] = {"w": jnp.zeros((3, 5))}
        with pytest.raises(CheckpointMismatchError, match=r"\['agent'\]\['w'\] is float32\(3, 2\) in the checkpoint") as same:
            checkpoints.restore(target)
        assert "written by podracer" not in str(same.value)
    # Written by another version: named, as a reason the state may be shaped differently.
    import podracer.checkpoint

    with Checkpointer(str(tmp_path / "a"), read_only=True) as checkpoints, pytest.MonkeyPatch.context() as patch:
        patch.setattr(podracer.checkpoint, "_version", lambda: "9.9.9")
        with pytest.raises(CheckpointMismatchError, match=r"\(the checkpoint was written by podracer \d+\.\d+\.\d+, "
                                                          r"this is podracer 9\.9\.9\)$"):
            checkpoints.restore(target)
    with pytest.raises(NoCheckpointError):
        Checkpointer(str(tmp_path / "missing"), read_only=True)


@pytest.mark.parametrize("damage", ["truncated", "emptied", "host_removed", "chunk_removed"])
def test_a_damaged_latest_checkpoint_is_a_clear_error_naming_the_fallback(tmp_path, damage):
    """A checkpoint damaged after orbax committed it (its array data cut short or emptied,
    its host counters removed, one device's chunk of a sharded array gone: orbax wraps that
    error in a bare `Exception`) is a one-line `CheckpointReadError` naming its step and the
    earlier checkpoint to fall back to; moved aside, the earlier one restores."""
    mesh = parallel.make_mesh(jax.devices()[:4], "device")
    with Checkpointer(str(tmp_path)) as checkpoints:
        for step in (1, 2):
            checkpoints.save(sharded_state(mesh, step), Progress(updates=step))
    latest = tmp_path / "2"
    if damage == "host_removed":
        os.remove(latest / "host" / "metadata")
    elif damage == "chunk_removed":
        assert remove_chunks(latest / "state", lambda key: key == "envs/0.3") == ["envs/0.3"]
    else:
        for data in (latest / "state" / "d").iterdir():  # the committed array data
            with open(data, "r+b") as f:
                f.truncate(data.stat().st_size // 2 if damage == "truncated" else 0)
    expected = (rf"^the checkpoint of update 2 in {tmp_path} cannot be read \(\w+: .*\); if it is damaged, "
                rf"move {latest} aside to use the checkpoint of update 1$")
    target = sharded_state(mesh, 0)
    with Checkpointer(str(tmp_path), read_only=True) as checkpoints:
        with pytest.raises(CheckpointReadError, match=expected) as caught:
            checkpoints.restore(target)
        if damage == "host_removed":  # also what `resume` reads first, and `evaluate`
            with pytest.raises(CheckpointReadError, match=expected):
                checkpoints.progress()
    assert "\n" not in str(caught.value)
    os.rename(latest, tmp_path / "damaged-2")
    with Checkpointer(str(tmp_path), read_only=True) as checkpoints:
        restored, progress = checkpoints.restore(target)
    assert progress.updates == 1
    assert_trees_equal(restored, sharded_state(mesh, 1))


def test_a_restore_that_fails_for_another_reason_is_not_called_damage(tmp_path, monkeypatch):
    """Only errors about the checkpoint's files become `CheckpointReadError` ("move it
    aside"); anything else (device memory, a wrong argument) is raised as it is, so a good
    checkpoint is never set aside on bad advice."""
    mesh = parallel.make_mesh(jax.devices()[:4], "device")
    with Checkpointer(str(tmp_path)) as checkpoints:
        checkpoints.save(sharded_state(mesh, 1), Progress(updates=1))
    for error in (RuntimeError("RESOURCE_EXHAUSTED: out of memory"), ValueError("bad restore argument"),
                  PermissionError("denied")):
        with Checkpointer(str(tmp_path), read_only=True) as checkpoints:
            def fail(*args, error=error, **kwargs):
                raise error

            monkeypatch.setattr(checkpoints._manager, "restore", fail)
            with pytest.raises(type(error)) as raised:
                checkpoints.restore(sharded_state(mesh, 0))
            assert not isinstance(raised.value, CheckpointReadError)


def test_config_round_trips_through_json():
    for make in all_presets().values():
        config = make()
        data = json.loads(json.dumps(config_lib.to_dict(config)))
        assert config_lib.from_dict(data, config_types()) == config
    data = config_lib.to_dict(all_presets()["ppo-catch-anakin"]())
    del data["checkpoint"]  # a config.json from before the section existed still loads
    assert config_lib.from_dict(data, config_types()).checkpoint == config_lib.CheckpointConfig()
    data["agent"]["learning_rat"] = 1.0
    with pytest.raises(config_lib.ConfigError, match="agent.learning_rat: no such field in PPOConfig"):
        config_lib.from_dict(data, config_types())


def writer(directory, mode):
    return subprocess.Popen([sys.executable, "-m", "tests.support.checkpoint_writer", str(directory), mode],
                            stdout=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO)


def assert_latest_is_complete(directory, expected_step=None):
    with Checkpointer(str(directory)) as checkpoints:
        step = checkpoints.latest_step()
        assert step is not None and (expected_step is None or step == expected_step)
        size = 16 if expected_step is not None else 4 * 2**20
        restored, progress = checkpoints.restore(state_for(0, size))
        assert progress.updates == step
        np.testing.assert_array_equal(np.asarray(restored["params"]), float(step))
        np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(step)))
        # The directory stays usable: the next save succeeds.
        checkpoints.save(state_for(step + 1, size), Progress(updates=step + 1))
        assert checkpoints.latest_step() == step + 1
    return step


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_killed_while_writing_keeps_the_previous_checkpoint_latest(tmp_path):
    """SIGKILL inside a save (data written, rename pending) leaves step 1 the latest; then
    SIGKILL at a random moment of a stream of 16 MB saves leaves a complete latest one."""
    proc = writer(tmp_path / "a", "finalize")
    assert proc.wait(timeout=100) == -9
    assert any("tmp" in name for name in os.listdir(tmp_path / "a"))  # the half-written step
    assert_latest_is_complete(tmp_path / "a", expected_step=1)

    proc = writer(tmp_path / "b", "loop")
    start = time.perf_counter()
    assert proc.stdout.readline().strip() == "1"
    first_save = time.perf_counter() - start
    proc.stdout.readline()
    time.sleep(random.uniform(0, first_save))
    proc.kill()
    proc.wait(timeout=30)
    assert assert_latest_is_complete(tmp_path / "b") >= 2


def test_a_mismatch_names_the_devices_the_checkpoint_was_written_on():
    """A checkpoint's per-device state fits the devices it was saved on: resumed on another
    number of devices or processes, the mismatch says how many it was written on and how to
    resume; on the same devices (or from a checkpoint that predates the record) it says only
    what differs."""
    from podracer.checkpoint import CheckpointMismatchError, _check_host, _version

    saved, expected = {"['key']": [[1, 2, 2], "uint32"]}, {"['key']": [[1, 1, 2], "uint32"]}
    host = {"leaves": saved, "version": _version(), "devices": jax.device_count() + 2, "processes": 1}
    with pytest.raises(CheckpointMismatchError, match=rf"written on {jax.device_count() + 2} devices \(1 process\), "
                       rf"this session has {jax.device_count()} devices \(1 process\); resume on what the run ran on"):
        _check_host(host, saved, expected)
    for same in ({**host, "devices": jax.device_count()}, {"leaves": saved, "version": _version()}):
        with pytest.raises(CheckpointMismatchError) as error:
            _check_host(same, saved, expected)
        assert "written on" not in str(error.value) and "uint32(1, 2, 2) in the checkpoint" in str(error.value)
