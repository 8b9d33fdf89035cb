"""Run lifecycle in process: stop and resume exactly, NaN guard, mismatched checkpoints."""

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import pytest

from experiments import run_dir as run_dir_lib
from experiments import train as train_lib
from podracer.checkpoint import Checkpointer, CheckpointMismatchError, checkpoint_dir
from podracer.config import ConfigError, to_dict
from podracer.runner import NonFiniteError
from tests.support.helpers import TINY, assert_trees_equal, comparable, read_rows


class StopAfter:
    """`should_stop` that turns true after `calls` polls (one poll per host call)."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self):
        self.calls -= 1
        return self.calls < 0


@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(240)
def test_stop_and_resume_on_4_devices_is_exact(tmp_path):
    """Stopped after 2 host calls and resumed (twice: once more mid-way), the run ends with
    the same parameters and metrics rows as the same run uninterrupted; metrics.jsonl
    continues without duplicates; the newest `keep` checkpoints remain."""
    full = train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path / "full")))
    run_dir = tmp_path / "stopped"
    first = train_lib.train(dataclasses.replace(TINY, run_dir=str(run_dir)), should_stop=StopAfter(2))
    assert first.stopped and first.metrics[-1]["env_steps"] < full.metrics[-1]["env_steps"]
    # Rows written after the checkpoint (a crash between the two) must not be duplicated.
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps(first.metrics[-1]) + "\n")
    second = train_lib.resume(str(run_dir), should_stop=StopAfter(0))
    assert second.stopped
    last = train_lib.resume(str(run_dir))
    assert not last.stopped
    assert_trees_equal(last.state, full.state)  # agent, environments and keys, bit for bit
    assert comparable(read_rows(run_dir)) == comparable(read_rows(tmp_path / "full")) == comparable(full.metrics)
    # The agent is replicated and the env state sharded on the 4-device mesh after restore.
    assert last.state.envs.obs.sharding.spec == jax.sharding.PartitionSpec(None, "device")
    wall = [row["wall_s"] for row in read_rows(run_dir)]
    assert wall == sorted(wall)  # wall time continues over sessions
    with Checkpointer(checkpoint_dir(str(run_dir))) as checkpoints:
        assert checkpoints.all_steps() == [12, 14]


@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(240)
def test_a_stop_requested_during_the_last_call_reports_a_finished_run(tmp_path):
    """TINY's 14 updates are 5 host calls; a stop polled true after the 5th is dispatched
    ends the run where it would have ended anyway: not stopped, every env step done."""
    result = train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path / "run")), should_stop=StopAfter(4))
    assert not result.stopped and result.env_steps == TINY.total_env_steps
    early = train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path / "early")), should_stop=StopAfter(3))
    assert early.stopped and early.env_steps < TINY.total_env_steps


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_resume_with_another_config_is_a_clear_error(tmp_path):
    train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path / "run")), should_stop=StopAfter(0))
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    saved["agent"]["hidden_sizes"] = [32, 32]
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=r"checkpoint of update 3 was written with: agent.hidden_sizes is \[32, 32\] "
                                          r"but was \[64, 64\]"):
        train_lib.resume(str(tmp_path / "run"))
    # A checkpoint of an older podracer, saved without its config, is still checked array by array.
    from anakin import runner
    from anakin.program import checkpointed

    with Checkpointer(checkpoint_dir(str(tmp_path / "run"))) as checkpoints:
        state, progress = checkpoints.restore(checkpointed(runner.initial_state(TINY, runner.setup(TINY))))
    shutil.rmtree(checkpoint_dir(str(tmp_path / "run")))
    with Checkpointer(checkpoint_dir(str(tmp_path / "run"))) as checkpoints:
        checkpoints.save(state, progress)  # the layout a run without a population saves
    with pytest.raises(CheckpointMismatchError, match=r"critic_torso.*\(2, 64\) in the checkpoint but float32\(2, 32\)"):
        train_lib.resume(str(tmp_path / "run"))


@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(240)
def test_a_finished_run_trains_longer_with_a_larger_budget(tmp_path):
    """`total_env_steps` raised in a finished run's config.json: the resume goes on from the
    last checkpoint to the new budget, its rows continuing the old ones."""
    run_dir = tmp_path / "run"
    train_lib.train(dataclasses.replace(TINY, run_dir=str(run_dir)))
    saved = json.loads((run_dir / "config.json").read_text())
    saved["total_env_steps"] = 2 * TINY.total_env_steps
    (run_dir / "config.json").write_text(json.dumps(saved))
    longer = train_lib.resume(str(run_dir))
    assert not longer.stopped and longer.env_steps == 2 * TINY.total_env_steps
    steps = [row["env_steps"] for row in read_rows(run_dir)]
    assert steps == sorted(set(steps)) and steps[-1] == 2 * TINY.total_env_steps


def test_resume_refuses_an_edited_config_naming_the_field():
    """An edited config.json (another seed, learning rate or budget: the same shapes) would
    continue the run as neither the old run nor a new one: refused, naming the field. The
    sections of a session (run_dir, distributed, log, checkpoint) may change."""
    saved = json.loads(json.dumps(to_dict(TINY)))
    session = dataclasses.replace(TINY, run_dir="elsewhere", log=dataclasses.replace(TINY.log, console=True),
                                  checkpoint=dataclasses.replace(TINY.checkpoint, keep=5, every_updates=1))
    run_dir_lib.check_same_run(session, saved, 3)
    run_dir_lib.check_same_run(dataclasses.replace(TINY, seed=7), None, 3)  # saved by an older podracer: unchecked
    older = json.loads(json.dumps(saved))  # fields a later podracer added are at their defaults: not a difference
    del older["agent"]["learning_rate"], older["total_env_steps"]
    run_dir_lib.check_same_run(TINY, older, 3)
    # The budget (to train longer), devices and reporting cadence may change too.
    longer = dataclasses.replace(TINY, total_env_steps=2 * TINY.total_env_steps,
                                 arch=dataclasses.replace(TINY.arch, updates_per_call=4, devices=(1, 2, 3, 0)))
    run_dir_lib.check_same_run(longer, saved, 3)
    edits = {
        "seed is 7 but was 0": dataclasses.replace(TINY, seed=7),
        "arch.num_envs is 16 but was 8": dataclasses.replace(TINY, arch=dataclasses.replace(TINY.arch, num_envs=16)),
        "agent.learning_rate is 0.5 but was 0.00025": dataclasses.replace(
            TINY, agent=dataclasses.replace(TINY.agent, learning_rate=0.5)),
        "agent.hidden_sizes is \\[32\\] but was \\[64, 64\\]": dataclasses.replace(
            TINY, agent=dataclasses.replace(TINY.agent, hidden_sizes=(32,))),
    }
    for message, edited in edits.items():
        with pytest.raises(ConfigError, match=rf"checkpoint of update 3 was written with: {message}; a resume"):
            run_dir_lib.check_same_run(edited, saved, 3)


def nan_after(update, agent_update):
    """An agent update that poisons the parameters from update number `update` on."""

    def poisoned(state, traj, key):
        state, metrics = agent_update(state, traj, key)
        bad = state.update_count >= update
        params = jax.tree.map(lambda p: jnp.where(bad, jnp.nan, p), state.params)
        return state.replace(params=params), metrics

    return poisoned


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_non_finite_parameters_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, monkeypatch):
    from anakin import runner

    make_agent = runner.make_checked_agent
    monkeypatch.setattr(runner, "make_checked_agent",
                        lambda *a, **k: (lambda agent: agent._replace(update=nan_after(8, agent.update)))(make_agent(*a, **k)))
    run_dir = tmp_path / "run"
    config = dataclasses.replace(TINY, run_dir=str(run_dir), arch=dataclasses.replace(TINY.arch, updates_per_call=1))
    with pytest.raises(NonFiniteError, match=r"non-finite parameters in update 8 \(seed 0, 1\).*last good checkpoint is update 4"):
        train_lib.train(config)
    with Checkpointer(checkpoint_dir(str(run_dir))) as checkpoints:
        assert checkpoints.latest_step() == 4
    assert [row["env_steps"] for row in read_rows(run_dir)] == [128 * u for u in range(1, 8)]
    # The checkpoint kept holds finite parameters, every seed's.
    one_seed = jax.eval_shape(runner.setup(config).agent.init, jax.random.key(0)).params
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((2,) + x.shape, x.dtype), one_seed)
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        params, _ = checkpoints.restore_part(abstract, ("agent", "params"))
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(params))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_error_waits_for_the_host_call_in_flight(monkeypatch):
    """When a call's metrics are non-finite, the next call is already running (the pipeline
    dispatches call k+1 before reading call k): the error must wait for it. Raised at once,
    the command exited while a thread still waited on that XLA program, and the interpreter
    aborted at exit (SIGABRT, exit status 134, "terminate called ...") instead of exiting 1
    with its one line (`podracer train ppo-cartpole-anakin --agent.learning-rate 1e30`)."""
    import time

    from anakin import runner

    completions = []

    class SlowCompletion(runner.Completion):  # a call that takes a while to finish
        def __init__(self, outputs):
            super().__init__(outputs)
            completions.append(self)

        def _wait(self, outputs):
            time.sleep(1.0)
            super()._wait(outputs)

    make_agent = runner.make_checked_agent
    monkeypatch.setattr(runner, "make_checked_agent",
                        lambda *a, **k: (lambda agent: agent._replace(update=nan_after(1, agent.update)))(make_agent(*a, **k)))
    monkeypatch.setattr(runner, "Completion", SlowCompletion)
    config = dataclasses.replace(TINY, arch=dataclasses.replace(TINY.arch, updates_per_call=1), total_env_steps=8 * 16 * 4)
    with pytest.raises(NonFiniteError, match="update 1 "):
        runner.train(config)
    assert len(completions) == 2  # the failed call and the one in flight
    assert not any(completion._thread.is_alive() for completion in completions)


def test_the_progress_bar_ends_at_the_env_steps_the_run_takes(tmp_path):
    """A run takes whole updates, up to `total_env_steps`: the console's bar counts to the
    steps it will reach (2,560 of 3,000 here), so a finished run shows 100%, not 85%."""
    from experiments.presets import PRESETS
    from experiments.train import make_sinks
    from podracer.logging import ConsoleProgress

    config = dataclasses.replace(PRESETS["ppo-cartpole-anakin"](), total_env_steps=3_000)  # 512 per update
    sinks = make_sinks(config, str(tmp_path), console=True, progress=None)
    try:
        bar = next(sink for sink in sinks.sinks if isinstance(sink, ConsoleProgress))._bar
        assert bar.total == 2_560
    finally:
        sinks.close()
