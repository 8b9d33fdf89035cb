"""Anakin and Sebulba across processes with jax.distributed (gloo CPU collectives on 127.0.0.1)."""

import subprocess
import sys

import jax
import numpy as np
import pytest

import anakin
from experiments.launch import free_port
from tests.support.distributed_worker import small_config
from tests.support.helpers import REPO, subprocess_env


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_processes_of_two_devices_equal_one_process_of_four(tmp_path):
    port, out = free_port(), tmp_path / "params.npz"
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.support.distributed_worker", str(i), "2", str(port), str(out)],
                         cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs

    # Afterwards, not meanwhile: three compiling processes on two cores are slower than two.
    reference = anakin.train(small_config())  # this process: 1 x 4 fake devices
    assert len(jax.devices()) == 4

    saved = np.load(out)
    expected = [np.asarray(leaf)[0] for leaf in jax.tree.leaves(reference.state.agent.params)]
    for i, leaf in enumerate(expected):
        np.testing.assert_allclose(saved[f"arr_{i}"][0], leaf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saved["returns"], [r["episode_return"] for r in reference.metrics], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sebulba_across_two_processes_stops_together(tmp_path):
    """Each process acts on its own actor device; the learner mesh spans both processes'
    learner devices; a stop asked by process 1 alone stops both after the same update."""
    from podracer.checkpoint import Checkpointer, checkpoint_dir

    port, run_dir = free_port(), tmp_path / "run"
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.support.distributed_worker", str(i), "2", str(port), str(run_dir),
                          "sebulba"], cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    first, second = (np.load(run_dir / f"process-{i}.npz") for i in range(2))
    assert bool(first["stopped"]) and bool(second["stopped"])
    assert int(first["update_count"]) == int(second["update_count"]) == 3
    for name in first.files:
        if name.startswith("arr_"):  # the same parameters in both processes
            np.testing.assert_array_equal(first[name], second[name])
    assert list(first["env_steps"]) == [64, 128, 192]  # env steps of both processes together
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        assert checkpoints.latest_step() == 3
