"""Multi-process runs never hang (issue #19): one agreed run directory, bounded waits, a
config that differs is an error on every process, honest metrics.

Each test starts `podracer train` processes of 2 fake CPU devices each, as the README's
cluster example does (gloo collectives on 127.0.0.1), with short deadlines; every wait on
a process has a timeout, so a hang fails the test.
"""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from experiments.launch import free_port, process_command
from podracer.checkpoint import Checkpointer, checkpoint_dir
from tests.support.helpers import read_rows, remove_chunks, subprocess_env

DEADLINES = ["--distributed.timeout-s", "60", "--distributed.stop-timeout-s", "8",
             "--distributed.heartbeat-timeout-s", "30"]
QUIET = ["--log.console", "false", "--log.tensorboard", "false"]
# 12 updates of 8 envs x 16 steps, 2 updates per host call, a checkpoint every 2 updates.
ANAKIN = ["ppo-catch-anakin", "--arch.num-envs", "8", "--arch.rollout-length", "16", "--arch.updates-per-call", "2",
          "--agent.num-minibatches", "2", "--total-env-steps", str(8 * 16 * 12), "--checkpoint.every-updates", "2",
          *QUIET]
# 12 updates of 4 envs x 16 steps (2 envs per process), 1 actor + 1 learner device per process.
SEBULBA = ["ppo-cartpole-sebulba", "--arch.num-envs", "4", "--arch.rollout-length", "16", "--arch.updates-per-log", "1",
           "--arch.actor-devices", "0", "--arch.learner-devices", "1", "--arch.max-policy-lag", "1",
           "--agent.num-minibatches", "2", "--agent.num-epochs", "1", "--agent.hidden-sizes", "16",
           "--total-env-steps", str(4 * 16 * 12), "--checkpoint.every-updates", "2", *QUIET]


def start(train_args, port, process_id, cwd, hook=(), num_processes=2, deadlines=DEADLINES):
    """Process `process_id` of a run, started the way the README's cluster example does."""
    command = process_command([*train_args, *deadlines], port, num_processes, process_id)
    return subprocess.Popen([sys.executable, "-m", "tests.support.multiprocess_cli", *hook, *command[3:]], cwd=cwd, env=subprocess_env(2),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, within_s):
    """`(returncode, stdout, stderr, seconds)`: the process must exit within `within_s`."""
    begin = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process did not exit within {within_s} s (hang):\n{err[-3000:]}")
    return proc.returncode, out, err, time.monotonic() - begin


def error_line(err):
    lines = [line for line in err.splitlines() if line.startswith("podracer: error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_processes_that_disagree_fail_at_start_on_every_process(tmp_path):
    """Another --run-dir, another config value, a run directory a process cannot see, or
    one process resuming a run while another starts one: one line naming it on every
    process, exit 2, before anything compiles."""
    from experiments.cli import resolve_config
    from podracer import config as config_lib

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "config.json").write_text(json.dumps(config_lib.to_dict(resolve_config(ANAKIN[0], ANAKIN[1:]))))
    cases = {
        "run_dir": [[*ANAKIN, "--run-dir", str(tmp_path / f"p{i}")] for i in range(2)],
        "num_envs": [[*SEBULBA, "--arch.num-envs", envs] for envs in ("4", "8")],
        "seed": [[*ANAKIN, "--seed", seed] for seed in ("0", "1")],
        "session": [["--resume", str(tmp_path / "saved")], ANAKIN],
    }
    procs = {name: [start(args[i], port, i, tmp_path) for i in range(2)]
             for (name, args), port in zip(cases.items(), [free_port() for _ in cases])}
    # The same relative --run-dir from two working directories: storage process 1 cannot see.
    port = free_port()
    procs["storage"] = [start([*ANAKIN, "--run-dir", "run"], port, i, tmp_path / "ab"[i]) for i in range(2)]
    expected = {
        "run_dir": f"process 1 has run_dir '{tmp_path / 'p1'}' but process 0 has '{tmp_path / 'p0'}'",
        "num_envs": "process 1 has arch.num_envs=8 but process 0 has arch.num_envs=4",
        "seed": "process 1 has seed=1 but process 0 has seed=0",
        "session": "process 1 starts a new run (a preset) but process 0 resumes the run (--resume)",
        "storage": "is not on storage every process can see: process 1 cannot see",
    }
    for name, pair in procs.items():
        for proc in pair:
            code, _, err, _ = finish(proc, 150)
            assert code == 2, (name, err[-3000:])
            assert expected[name] in error_line(err), name
    assert not (tmp_path / "p1").exists() and not (tmp_path / "b" / "run").exists()
    assert not any((tmp_path / "a" / "run").glob(".podracer-marker-*"))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_checkpoint_shard_damaged_for_one_process_ends_every_process_at_once(tmp_path):
    """A resume whose latest checkpoint lost the chunks that only process 1 reads (its
    devices' environments): process 1 exits 2 with the CheckpointReadError's line, and
    process 0, which restored its own shards, exits within seconds naming process 1's
    error, rather than waiting on process 1 in a collective until distributed.timeout_s."""
    from experiments import train as train_lib
    from experiments.cli import resolve_config

    run_dir = tmp_path / "run"
    config = resolve_config(ANAKIN[0], [*ANAKIN[1:], "--run-dir", str(run_dir)])
    assert train_lib.train(config, should_stop=lambda: True).stopped  # checkpoint 2, on this process's 4 devices
    removed = remove_chunks(run_dir / "checkpoints" / "2" / "state",
                            lambda key: key.startswith("envs.") and key.split("/")[1].startswith("0.3"))
    assert "envs.obs/0.3.0.0" in removed  # device 3 of 4: process 1's second device

    port, begin = free_port(), time.monotonic()
    deadlines = ["--distributed.timeout-s", "120", *DEADLINES[2:]]
    procs = [start(["--resume", str(run_dir)], port, i, tmp_path, deadlines=deadlines) for i in range(2)]
    code, _, err, _ = finish(procs[1], 110)
    assert code == 2, err[-3000:]
    damaged = f"the checkpoint of update 2 in {run_dir / 'checkpoints'} cannot be read (ValueError: NOT_FOUND"
    assert error_line(err).startswith(f"podracer: error: {damaged}")
    code, _, err, waited = finish(procs[0], 110)
    assert code == 1 and waited < 15, err[-3000:]
    assert error_line(err).startswith(f"podracer: error: process 1 failed: {damaged}")
    # Before the deadline (120 s) of a wait on process 1 could pass: both processes' start-up
    # (imports, joining, setup) counts here too, which a loaded machine can slow to a minute.
    assert time.monotonic() - begin < 100


def latest_checkpoint(run_dir):
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        return checkpoints.latest_step()


def wait_for_row(run_dir, env_steps, procs, within_s=240):
    """Until metrics.jsonl has a row past `env_steps` (training is under way)."""
    deadline = time.monotonic() + within_s
    while not any(row["env_steps"] > env_steps for row in read_rows(run_dir, missing_ok=True)):
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def bench_limit(arch, train_args):
    """`podracer bench`'s physical limit for the runs' config in this process: the same
    envs (and, for Sebulba, the same actor threads: one per process of the runs) acting
    with the same network, without learning."""
    from experiments.cli import resolve_config

    if arch == "anakin":
        from experiments.bench import bench_anakin

        return bench_anakin(resolve_config(train_args[0], train_args[1:]), repeats=3)["limit_sps"]
    from sebulba.benchmark import limit_sps
    from sebulba.runner import initial_state, setup

    one_process = ["--arch.learner-devices", "1,2", "--arch.threads-per-actor-device", "2"]
    config = resolve_config(train_args[0], [*train_args[1:], *one_process])
    s = setup(config)
    params = initial_state(config, s).params
    # `bench`'s limit (the median of 3 rounds of a second), without its other measurements.
    return float(np.median([limit_sps(config, s, params, 1.0)[0] for _ in range(3)]))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["anakin", "sebulba"])
@pytest.mark.timeout(900)
def test_a_run_across_processes_survives_a_killed_process_and_stops(arch, tmp_path):
    """The README's cluster command, no --run-dir, process 1 started seconds after process
    0: one run directory. Process 1 SIGKILLed inside the second checkpoint's write:
    process 0 exits non-zero at once, naming the checkpoint and process 1; the first
    checkpoint stays the latest. Resumed, then process 1 frozen (SIGSTOP) so that process 0
    blocks on it: SIGTERM stops both within the deadline. Resumed again, the run ends
    with every update and metrics row once, none of whose sps exceeds bench's limit."""
    train_args = ANAKIN if arch == "anakin" else SEBULBA
    steps_per_update = 8 * 16 if arch == "anakin" else 4 * 16

    port = free_port()
    leader = start(train_args, port, 0, tmp_path)
    time.sleep(3)
    second = start(train_args, port, 1, tmp_path, hook=("--die-in-checkpoint", "2"))
    code, _, err, _ = finish(second, 600)
    assert code == -signal.SIGKILL and "killed inside checkpoint save 2" in err, err[-3000:]
    code, _, err, waited = finish(leader, 60)
    assert code != 0 and waited < 30, err[-3000:]
    assert "process 0 waited for the checkpoint of update 4: process 1" in err, err[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith(train_args[0]) and latest_checkpoint(run_dir) == 2

    port = free_port()
    resumed = [start(["--resume", str(run_dir)], port, i, tmp_path) for i in range(2)]
    wait_for_row(run_dir, 4 * steps_per_update, resumed)  # past the rows process 0 wrote before the kill
    resumed[1].send_signal(signal.SIGSTOP)
    time.sleep(2)  # process 0 now waits for process 1 in a collective
    for proc in resumed:
        proc.send_signal(signal.SIGTERM)
    code, _, err, waited = finish(resumed[0], 60)
    assert code == 128 + signal.SIGTERM and waited < 30, err[-3000:]
    assert "stopped by SIGTERM, but the run did not stop within distributed.stop_timeout_s" in error_line(err)
    resumed[1].send_signal(signal.SIGCONT)
    code, _, err, waited = finish(resumed[1], 60)
    assert code != 0 and waited < 45, err[-3000:]

    launcher = subprocess.Popen([sys.executable, "-m", "experiments.cli", "launch-local", "-n", "2", "--resume",
                                 str(run_dir), *DEADLINES], cwd=tmp_path, env=subprocess_env(2), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    code, out, err, _ = finish(launcher, 600)
    assert code == 0 and "done: " in out, err[-3000:]
    assert latest_checkpoint(run_dir) == 12
    rows = read_rows(run_dir, missing_ok=True)
    per_row = 2 if arch == "anakin" else 1
    assert [row["env_steps"] for row in rows] == [steps_per_update * per_row * k for k in range(1, 12 // per_row + 1)]

    # Honest throughput, across processes and in one (this one, 4 devices): no row above
    # the physical limit of this machine measured now.
    from experiments import train as train_lib
    from experiments.cli import resolve_config

    one = train_lib.train(resolve_config(train_args[0], [*train_args[1:], "--run-dir", str(tmp_path / "one")]))
    limit = bench_limit(arch, train_args)
    for run_rows in (rows, one.metrics):
        assert max(row["sps"] for row in run_rows) <= limit, ([row["sps"] for row in run_rows], limit)
