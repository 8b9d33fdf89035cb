"""Sebulba run lifecycle: checkpoints, stop and resume, NaN guard, evaluation of a host-env run."""

import dataclasses
import time

import jax
import numpy as np
import pytest

import sebulba.learner
import sebulba.runner
from experiments import train as train_lib
from experiments.evaluate import evaluate
from podracer.agents import PPOConfig
from podracer.checkpoint import Checkpointer, CheckpointMismatchError, checkpoint_dir
from podracer.config import CheckpointConfig, Config, ConfigError, EnvConfig, LogConfig
from podracer.runner import NonFiniteError
from sebulba import SebulbaConfig
from sebulba.learner import make_update_step
from tests.support.helpers import assert_trees_equal, nan_loss_at, nan_params_at, read_rows

pytestmark = pytest.mark.timeout(120)

# 12 updates of 4 envs x 16 steps on 1 actor and 2 learner devices, a row every 2 updates
# and a checkpoint every 4.
TINY = Config(
    env=EnvConfig("CartPole-v1"), agent=PPOConfig(num_minibatches=2, num_epochs=1, hidden_sizes=(16,)),
    arch=SebulbaConfig(num_envs=4, rollout_length=16, actor_devices=(0,), learner_devices=(1, 2),
                       max_policy_lag=1, updates_per_log=2),
    total_env_steps=4 * 16 * 12, log=LogConfig(console=False, tensorboard=False),
    checkpoint=CheckpointConfig(every_updates=4, keep=2),
)


@pytest.mark.slow
def test_stop_checkpoints_and_resume_continues_the_learner(tmp_path):
    run_dir = tmp_path / "run"
    config = dataclasses.replace(TINY, run_dir=str(run_dir))
    rows_seen = []
    stopped = train_lib.train(config, on_metrics=rows_seen.append, should_stop=lambda: len(rows_seen) >= 2)
    assert stopped.stopped
    stopped_at = int(stopped.state.update_count)
    assert 4 <= stopped_at < 12  # the learner stops after the update during which it was asked
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        assert checkpoints.latest_step() == stopped_at
        progress = checkpoints.progress()
        saved, _ = checkpoints.restore_part(jax.eval_shape(lambda: stopped.state.params), ("agent", "params"))
    assert progress.env_steps == stopped.env_steps == stopped_at * 64
    assert_trees_equal(saved, stopped.state.params)

    resumed = train_lib.resume(str(run_dir))
    assert not resumed.stopped
    assert int(resumed.state.update_count) == 12  # counted on from the checkpoint, not from 0
    assert resumed.env_steps == 12 * 64
    steps = [row["env_steps"] for row in read_rows(run_dir)]
    assert steps == sorted(set(steps)) and steps[-1] == 12 * 64  # no row twice, none after the end
    # A stop between two log points (updates_per_log 2) logs its last updates first.
    assert stopped_at * 64 in steps
    assert read_rows(run_dir)[-1]["wall_s"] > progress.wall_s
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        assert checkpoints.latest_step() == 12

    result = evaluate(str(run_dir), episodes=3, seed=1)
    assert result["episodes"] == 3 and result["env_steps"] == 12 * 64
    assert evaluate(str(run_dir), episodes=3, seed=1)["mean_return"] == result["mean_return"]
    with pytest.raises(ConfigError, match="no image observations"):
        evaluate(str(run_dir), episodes=1, video=str(tmp_path / "cartpole.gif"))


@pytest.mark.slow
def test_resume_with_another_network_is_a_clear_error(tmp_path):
    config = dataclasses.replace(TINY, total_env_steps=4 * 16 * 4)
    with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
        sebulba.runner.train(config, checkpointer=checkpoints)
    other = dataclasses.replace(config, agent=dataclasses.replace(config.agent, hidden_sizes=(32,)))
    with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
        with pytest.raises(CheckpointMismatchError, match="does not match the config"):
            sebulba.runner.train(other, checkpointer=checkpoints, resume=True)


def test_non_finite_loss_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(sebulba.runner, "make_update_step", nan_loss_at(make_update_step, 6))
    with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
        with pytest.raises(NonFiniteError, match="update 6.*last good checkpoint is update 4"):
            sebulba.runner.train(TINY, checkpointer=checkpoints)
        assert checkpoints.latest_step() == 4


@pytest.mark.costly
def test_non_finite_parameters_on_a_checkpoint_step_keep_the_last_good_checkpoint(tmp_path, monkeypatch):
    """Update 8, a checkpoint step, returns NaN parameters with a finite loss: the learner
    stops naming the parameters, never checkpoints them, and the latest checkpoint stays
    update 4, whose parameters are finite."""
    monkeypatch.setattr(sebulba.runner, "make_update_step", nan_params_at(make_update_step, 8))
    with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
        with pytest.raises(NonFiniteError, match="non-finite parameters at update 8.*last good checkpoint is update 4"):
            sebulba.runner.train(TINY, checkpointer=checkpoints)
        assert checkpoints.all_steps() == [4]
    abstract = jax.eval_shape(sebulba.runner.setup(TINY).agent.init, jax.random.key(0)).params
    with Checkpointer(str(tmp_path / "checkpoints"), read_only=True) as checkpoints:
        params, _ = checkpoints.restore_part(abstract, ("agent", "params"))
    assert all(bool(jax.numpy.isfinite(leaf).all()) for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("frame_stack", [3, 4])
def test_atari_video_draws_the_newest_grayscale_frame(frame_stack):
    """`evaluate --video` of an Atari run draws the newest of the stacked frames in gray,
    also with `--env.frame-stack 3`, whose 3 channels are frames, not red, green and blue."""
    import numpy as np

    from experiments.evaluate import Policy, host_episode_returns

    config = dataclasses.replace(TINY, env=EnvConfig("Breakout-v5", frame_stack=frame_stack, max_episode_steps=30))
    policy = Policy(lambda p, obs, key, core, start: (np.ones(len(obs), np.int32), core), lambda n: (None, None))
    _, frames, _ = host_episode_returns(config, policy, None, jax.random.key(0), 1, record=True)
    assert frames.shape == (30, 84, 84, 3) and frames.dtype == np.uint8
    assert (frames[..., 0] == frames[..., 1]).all() and (frames[..., 1] == frames[..., 2]).all()


@pytest.mark.parametrize("env_id,drawable", [("Breakout-v5", True), ("Breakout-MinAtar", False),
                                              ("CartPole-v1", False)])
def test_video_of_a_host_run_needs_pixel_observations(env_id, drawable):
    """`evaluate --video` of a Sebulba run draws uint8 pixel observations (Atari); a MinAtar
    game's 0/1 planes, also `[H, W, C]`, would make a black picture: refused with one line
    naming what it observes, as the Anakin path refuses an environment that cannot render."""
    from experiments.evaluate import _check_video

    config = dataclasses.replace(TINY, env=EnvConfig(env_id))
    if drawable:
        _check_video(None, config, "episode.gif")
        return
    with pytest.raises(ConfigError, match=f"{env_id}.*no image observations.*float32"):
        _check_video(None, config, "episode.gif")


def test_every_checkpoint_covers_only_logged_updates(tmp_path):
    """A checkpoint between two log points (every 4 updates, rows every 3) first logs the
    updates since the last row: a resume from it (after a crash) starts logging after them,
    so none of them is missing from metrics.jsonl."""
    config = dataclasses.replace(TINY, run_dir=str(tmp_path / "run"),
                                 arch=dataclasses.replace(TINY.arch, updates_per_log=3))
    train_lib.train(config)
    steps = [row["env_steps"] for row in read_rows(tmp_path / "run")]
    assert steps == [u * 64 for u in (3, 4, 6, 8, 9, 12)]
    with Checkpointer(checkpoint_dir(config.run_dir), read_only=True) as checkpoints:
        assert [checkpoints.progress(step).rows for step in checkpoints.all_steps()] == [4, 6]  # updates 8, 12


def test_evaluating_an_episode_that_never_ends_stops_at_max_steps():
    """A host environment without a time limit (Gymnasium's CliffWalking-v1) and a policy that
    never reaches its goal (always "up", into the wall): evaluation ends after `max_steps`
    steps, counting each episode's return so far and how many were unfinished, instead of
    looping forever."""
    from experiments.evaluate import Policy, host_episode_returns

    config = dataclasses.replace(TINY, env=EnvConfig("CliffWalking-v1", backend="gymnasium"))
    policy = Policy(lambda p, obs, key, core, start: (np.zeros(len(obs), np.int32), core), lambda n: (None, None))
    returns, _, unfinished = host_episode_returns(config, policy, None, jax.random.key(0), 3, max_steps=40)
    np.testing.assert_array_equal(returns, [-40.0] * 3)
    assert unfinished == 3


@pytest.mark.costly
def test_a_checkpoint_waits_for_the_rows_it_counts_to_be_written(tmp_path):
    """The learner saves a checkpoint counting the rows it queued; with slow sinks (here
    0.3 s a row) it waits until the main thread has written them, so a process killed just
    after the save leaves no row the checkpoint counts unwritten."""
    written = []
    seen = []

    class Recording(Checkpointer):
        def save(self, state, progress):
            seen.append((progress.rows, len(written)))
            super().save(state, progress)

    def slow_sink(row):
        time.sleep(0.3)
        written.append(row)

    with Recording(str(tmp_path / "checkpoints")) as checkpoints:
        sebulba.runner.train(TINY, checkpointer=checkpoints, on_metrics=slow_sink)
    assert [rows for rows, _ in seen] == [2, 4, 6]  # updates 4, 8, 12 (rows every 2 updates)
    assert all(rows == count for rows, count in seen), seen


def test_a_stop_between_log_points_flushes_its_updates_into_a_row():
    """Sebulba logs every `updates_per_log` updates; a run that stops in between (a stop
    request, SIGTERM) flushes the updates since the last row before it checkpoints, so
    after a resume no update is missing from metrics.jsonl; a flush with nothing pending
    writes nothing."""
    from podracer.runner import EpisodeStats
    from sebulba.actor import RolloutItem
    from sebulba.learner import UpdateRecord
    from sebulba.metrics import MetricsReporter

    rows = []
    reporter = MetricsReporter(steps_per_update=10, updates_per_log=4, num_updates=12, emit=rows.append)
    timings = dict.fromkeys(("env_wait_s", "inference_s", "param_wait_s", "queue_wait_s"), 0.0)
    item = RolloutItem(None, 0, EpisodeStats.host_zeros(), timings, reporter.clock.last)
    for update, loss in ((1, 1.0), (2, 2.0), (3, 6.0)):
        reporter(UpdateRecord(update, {"loss": np.float32(loss)}, [item], [0], 0.0, 0.0, 0,
                              EpisodeStats.host_zeros()))
    assert rows == []
    reporter.flush()
    assert [row["env_steps"] for row in rows] == [30] and rows[0]["loss"] == 3.0 and reporter.rows == 1
    reporter.flush()
    assert len(rows) == 1 and reporter.rows == 1


@pytest.mark.parametrize("when", ["before the run", "while compiling"])
def test_a_stop_before_the_first_update_applies_none(tmp_path, monkeypatch, when):
    """A stop asked for while the run sets up or compiles (Ctrl-C, SIGTERM) ends a
    single-process run before its first update, instead of after it: on a CPU a CNN's
    first update (compile and run) takes minutes. The updates applied so far (none) are
    checkpointed and the run resumes from there."""
    monkeypatch.setattr(sebulba.learner, "STUCK_S", 60.0)  # actors that compile slowly are still waited for
    asked, updates = [when == "before the run"], []

    def counting(agent, mesh):
        step = make_update_step(agent, mesh)

        def counted(state, trajectories, keys):
            updates.append(1)
            return step(state, trajectories, keys)

        def compile_ahead(state, trajectories, keys):
            step.compile(state, trajectories, keys)
            asked.append(True)  # Ctrl-C while the update compiles

        counted.compile = compile_ahead
        return counted

    monkeypatch.setattr(sebulba.runner, "make_update_step", counting)
    with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
        result = sebulba.runner.train(TINY, checkpointer=checkpoints, should_stop=lambda: any(asked))
        assert checkpoints.latest_step() == 0 and checkpoints.progress().env_steps == 0
    assert result.stopped and result.env_steps == 0 and updates == []
    assert int(result.state.update_count) == 0
    if when == "before the run":
        with Checkpointer(str(tmp_path / "checkpoints")) as checkpoints:
            resumed = sebulba.runner.train(TINY, checkpointer=checkpoints, resume=True)
        assert not resumed.stopped and int(resumed.state.update_count) == 12
