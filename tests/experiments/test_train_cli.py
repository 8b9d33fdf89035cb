"""The lifecycle commands: SIGTERM and --resume, evaluate, plot, and their user errors."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import jax
import numpy as np
import pytest

from experiments import run_dir as run_dir_lib
from experiments import train as train_lib
from experiments.cli import main
from experiments.signals import stop_on_signals
from podracer.agents import make_agent
from podracer.checkpoint import Checkpointer, checkpoint_dir
from podracer.config import ConfigError, to_dict
from podracer.envs import make_jax_env
from tests.support.helpers import (
    REPO,
    TINY,
    TINY_ARGS,
    assert_one_line_error,
    assert_trees_equal,
    comparable,
    read_rows,
    run_main,
    subprocess_env,
)


def cli(*args, **popen):
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", *map(str, args)], cwd=REPO,
                            env=subprocess_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def final_agent(run_dir):
    """The agent state (all seeds) of a run's latest checkpoint."""
    config = run_dir_lib.load_run_config(str(run_dir))
    env = make_jax_env(config.env.id)
    params = env.default_params
    agent = make_agent(config.agent, env.observation_spec(params), env.action_spec(params), num_updates=1,
                       axis_name=None)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((config.arch.num_seeds,) + x.shape, x.dtype),
                            jax.eval_shape(agent.init, jax.random.key(0)))
    with Checkpointer(checkpoint_dir(str(run_dir)), read_only=True) as checkpoints:
        return checkpoints.restore_agent(abstract)[0]




@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(240)
def test_sigterm_then_resume_equals_the_uninterrupted_run(tmp_path):
    """`podracer train` gets SIGTERM part-way, checkpoints and exits 143; `--resume` ends
    with the same parameters, optimizer state and metrics as a run never interrupted."""
    stopped_dir = tmp_path / "stopped"
    # A checkpoint after every call keeps this run slow enough to be caught part-way.
    stopped = cli("train", *TINY_ARGS, "--checkpoint.every-updates", 3, "--run-dir", stopped_dir)
    metrics = stopped_dir / "metrics.jsonl"
    deadline = time.time() + 180
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1) and time.time() < deadline:
        assert stopped.poll() is None, stopped.communicate()
        time.sleep(0.05)
    stopped.send_signal(signal.SIGTERM)
    out, err = stopped.communicate(timeout=120)
    assert stopped.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "--resume" in err
    assert len(read_rows(stopped_dir)) < 5  # of 5
    resumed = cli("train", "--resume", stopped_dir)
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err
    assert "done: 1,792 env steps" in out

    config = run_dir_lib.load_run_config(str(stopped_dir))
    assert (config.agent, config.arch) == (TINY.agent, TINY.arch)
    full = train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path / "full")))
    assert comparable(read_rows(stopped_dir)) == comparable(full.metrics)
    assert_trees_equal(final_agent(stopped_dir), full.state.agent)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    train_lib.train(dataclasses.replace(TINY, run_dir=str(run_dir)))
    return run_dir


def catch_agent(run_dir):
    """The agent of a Catch run directory (to build or read its parameters)."""
    config = run_dir_lib.load_run_config(str(run_dir))
    env = make_jax_env(config.env.id)
    return make_agent(config.agent, env.observation_spec(None), env.action_spec(None), num_updates=1, axis_name=None)


def catch_greedy_returns(run_dir, params=None) -> list[float]:
    """The return of agent 0's greedy policy (or of `params`) from each starting column of
    the ball, on a NumPy Catch (10 x 5, the paddle starts in column 2, the ball falls 9 rows)."""
    params = jax.tree.map(lambda x: x[0], final_agent(run_dir).params) if params is None else params
    greedy = jax.jit(catch_agent(run_dir).greedy_act)
    returns = []
    for column in range(5):
        ball_y, paddle = 0, 2
        while ball_y < 9:
            board = np.zeros((1, 10, 5), np.float32)
            board[0, ball_y, column] = board[0, 9, paddle] = 1.0
            paddle = int(np.clip(paddle + int(greedy(params, board)[0]) - 1, 0, 4))
            ball_y += 1
        returns.append(1.0 if paddle == column else -1.0)
    return returns


@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(120)
def test_evaluate_json_is_reproducible_and_counts_episodes(trained_run, capsys, tmp_path):
    main(["evaluate", str(trained_run), "--episodes", "7", "--seed", "5", "--json"])
    first = json.loads(capsys.readouterr().out)
    main(["evaluate", str(trained_run), "--episodes", "7", "--seed", "5", "--json"])
    assert json.loads(capsys.readouterr().out) == first
    assert first["episodes"] == 7 and {"mean_return", "std_return"} <= set(first) and first["env_steps"] == 1792
    # Each Catch episode returns +1 or -1: 7 of them sum to an odd number, and std^2 = 1 - mean^2.
    caught_minus_missed = 7 * first["mean_return"]
    assert abs(caught_minus_missed - round(caught_minus_missed)) < 1e-6 and round(caught_minus_missed) % 2 == 1
    np.testing.assert_allclose(first["std_return"], np.sqrt(1 - first["mean_return"] ** 2), atol=1e-6)
    # The greedy policy of agent 0, played by hand from each of the 5 columns a ball can start
    # in: evaluate's mean over 400 episodes is their average, up to sampling the columns.
    by_column = catch_greedy_returns(trained_run)
    main(["evaluate", str(trained_run), "--episodes", "400", "--seed", "5", "--json"])
    many = json.loads(capsys.readouterr().out)
    tolerance = 0.0 if len(set(by_column)) == 1 else 0.2  # 4 standard errors of 400 draws
    assert abs(many["mean_return"] - np.mean(by_column)) <= tolerance + 1e-6, (many, by_column)
    main(["evaluate", str(trained_run), "--episodes", "3", "--agent-seed", "1", "--sample",
          "--video", str(tmp_path / "catch.gif")])
    out = capsys.readouterr().out
    assert "over 3 episodes (sample policy" in out
    assert "catch.gif (an episode of return 1.00)" in out or "catch.gif (an episode of return -1.00)" in out
    from PIL import Image

    gif = Image.open(tmp_path / "catch.gif")
    assert gif.n_frames == 10 and gif.size == (5 * 24, 10 * 24)  # reset + 9 steps of a 10-row board


def perfect_catch_params(agent):
    """Parameters of the Catch MLP actor-critic (tanh, separate torsos) whose policy follows
    the ball: one hidden unit computes `tanh(0.1 (ball column - paddle column))`, the next
    passes it on, and the policy moves towards the ball, staying when above it."""
    params = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), jax.eval_shape(agent.init, jax.random.key(0)).params)
    layers, columns = params["params"], np.arange(5)
    for row in range(9):  # the ball: rows 0 to 8
        layers["torso"]["Dense_0"]["kernel"][row * 5 + columns, 0] = 0.1 * columns
    layers["torso"]["Dense_0"]["kernel"][45 + columns, 0] = -0.1 * columns  # the paddle: row 9
    layers["torso"]["Dense_1"]["kernel"][0, 0] = 1.0
    one_column = np.tanh(np.tanh(0.1))
    layers["policy"]["kernel"][0] = [-100.0, 0.0, 100.0]  # left, stay, right
    layers["policy"]["bias"][1] = 50.0 * one_column  # stay wins only when the ball is above
    return params


@pytest.mark.xdist_group("tiny-run")
def test_evaluate_scores_the_checkpoints_policy(trained_run, tmp_path, capsys):
    """A checkpoint holding a policy that always catches the ball evaluates to exactly 1."""
    from podracer.checkpoint import Progress
    from podracer.types import AgentState

    class Saved(NamedTuple):  # the part of a run's state that evaluate reads
        agent: AgentState

    run_dir = tmp_path / "perfect"
    run_dir.mkdir()
    (run_dir / "config.json").write_text((trained_run / "config.json").read_text())
    perfect = perfect_catch_params(catch_agent(run_dir))
    assert catch_greedy_returns(run_dir, perfect) == [1.0] * 5  # played by hand
    seeds = jax.tree.map(lambda x: np.stack([x, x]), perfect)  # the run has 2 seeds
    with Checkpointer(checkpoint_dir(str(run_dir))) as checkpoints:
        checkpoints.save(Saved(AgentState(seeds, (), np.int32(1))), Progress(updates=1, env_steps=128))
    main(["evaluate", str(run_dir), "--episodes", "50", "--seed", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert (result["mean_return"], result["std_return"], result["episodes"]) == (1.0, 0.0, 50), result

    # A later checkpoint whose policy always moves left: the latest by default, the perfect
    # one with --step 1; a step the run did not keep is an error naming those it did.
    left = jax.tree.map(np.copy, perfect)
    left["params"]["policy"]["bias"][0] = 1e3
    with Checkpointer(checkpoint_dir(str(run_dir))) as checkpoints:
        checkpoints.save(Saved(AgentState(jax.tree.map(lambda x: np.stack([x, x]), left), (), np.int32(2))),
                         Progress(updates=2, env_steps=256))
    main(["evaluate", str(run_dir), "--episodes", "50", "--seed", "1", "--json"])
    latest = json.loads(capsys.readouterr().out)
    assert (latest["step"], latest["env_steps"]) == (2, 256) and latest["mean_return"] < 0, latest
    main(["evaluate", str(run_dir), "--episodes", "50", "--seed", "1", "--json", "--step", "1"])
    first = json.loads(capsys.readouterr().out)
    assert (first["step"], first["env_steps"], first["mean_return"]) == (1, 128, 1.0), first
    assert_one_line_error(*run_main(capsys, "evaluate", run_dir, "--step", 3),
                          "--step 3: ", "holds no checkpoint of update 3 (it keeps updates 1, 2)")


def test_evaluating_episodes_longer_than_max_steps_ends_them_there():
    """A JAX environment given a time limit no evaluation reaches (MountainCar-v0 without a
    push never gets up the hill): the episodes end after `max_steps` steps with their return
    so far (-1 a step), counted as unfinished, instead of running for 10**9 steps."""
    from experiments.evaluate import Policy, episode_returns
    from podracer.envs.base import TimeLimitJaxEnv

    env = TimeLimitJaxEnv(make_jax_env("MountainCar-v0"), 10**9)
    coast = Policy(lambda p, obs, key, core, start: (jax.numpy.ones(len(obs), jax.numpy.int32), core),
                   lambda n: (None, None))
    returns, unfinished = episode_returns(env, coast, None, jax.random.key(0), 3, max_steps=40)
    np.testing.assert_array_equal(returns, [-40.0] * 3)
    assert unfinished == 3
    returns, unfinished = episode_returns(make_jax_env("MountainCar-v0"), coast, None, jax.random.key(0), 3)
    np.testing.assert_array_equal(returns, [-200.0] * 3)  # its own limit, well inside the default cap
    assert unfinished == 0


@pytest.mark.xdist_group("tiny-run")
def test_evaluate_user_errors(trained_run, tmp_path, capsys):
    assert_one_line_error(*run_main(capsys, "evaluate", trained_run, "--agent-seed", 2), "--agent-seed must be in [0, 2)")
    assert_one_line_error(*run_main(capsys, "evaluate", trained_run, "--seed", 2**32), "--seed must be in [0, 2**32)")
    assert_one_line_error(*run_main(capsys, "evaluate", trained_run, "--max-steps", 0), "--max-steps must be in")
    assert_one_line_error(*run_main(capsys, "evaluate", tmp_path / "nothing"), "is not a run directory")
    acrobot = tmp_path / "acrobot"
    acrobot.mkdir()
    config = dataclasses.replace(TINY, env=dataclasses.replace(TINY.env, id="Acrobot-v1"))
    (acrobot / "config.json").write_text(json.dumps(to_dict(config)))
    assert_one_line_error(*run_main(capsys, "evaluate", acrobot, "--video", tmp_path / "a.gif"),
                          "environment 'Acrobot-v1' cannot render")
    assert_one_line_error(*run_main(capsys, "evaluate", acrobot), "no checkpoint")


@pytest.mark.xdist_group("tiny-run")
def test_a_new_run_into_a_run_with_checkpoints_is_refused(trained_run, tmp_path, capsys):
    """Training anew into a directory that holds a run's checkpoints would mix the two runs
    (a later --resume continued the old run's state under the new config); it is refused
    before anything is written, and the old run is untouched."""
    saved = (trained_run / "config.json").read_text()
    rows = read_rows(trained_run)
    assert_one_line_error(*run_main(capsys, "train", *TINY_ARGS, "--agent.learning-rate", 1e-2, "--run-dir", trained_run),
                          "already holds a run with checkpoints; continue it with `podracer train --resume")
    assert (trained_run / "config.json").read_text() == saved
    assert read_rows(trained_run) == rows


@pytest.mark.costly
def test_a_new_run_starts_a_fresh_metrics_file(tmp_path):
    """Rows left by an earlier attempt that wrote no checkpoint are not kept by a new run."""
    (tmp_path / "metrics.jsonl").write_text('{"env_steps": 999999}\n')
    result = train_lib.train(dataclasses.replace(TINY, run_dir=str(tmp_path)), console=False)
    assert read_rows(tmp_path) == result.metrics


@pytest.mark.xdist_group("tiny-run")
def test_resuming_a_finished_run_reports_its_last_return(trained_run, tmp_path, capsys, monkeypatch):
    """A finished run resumed again trains nothing, compiles nothing and logs no row; its
    summary line still gives the run's last logged return (not `-`)."""
    import anakin.runner

    run_dir = tmp_path / "finished"
    shutil.copytree(trained_run, run_dir)
    last = [row["episode_return"] for row in read_rows(run_dir) if row.get("episode_return") is not None][-1]
    monkeypatch.setattr(anakin.runner, "make_train_call", lambda *args: pytest.fail("compiled a finished run"))
    code, captured = run_main(capsys, "train", "--resume", run_dir)
    assert code == 0, captured.err
    expected = f"{last:.1f}"
    assert f"final return {'0.0' if expected == '-0.0' else expected}, run dir" in captured.out
    assert read_rows(run_dir) == read_rows(trained_run)


@pytest.mark.xdist_group("tiny-run")
def test_resume_user_errors(trained_run, tmp_path, capsys):
    assert_one_line_error(*run_main(capsys, "train"), "give a preset to train, or --resume RUN_DIR")
    assert_one_line_error(*run_main(capsys, "train", "--resume", tmp_path / "nope"), "is not a run directory")
    assert_one_line_error(*run_main(capsys, "train", "ppo-catch-anakin", "--resume", trained_run),
                          "unexpected arguments: ppo-catch-anakin")
    assert_one_line_error(*run_main(capsys, "train", "--resume", trained_run, "--seed", "1"), "saved config")
    copy = tmp_path / "copy"
    copy.mkdir()
    saved = json.loads((trained_run / "config.json").read_text())
    saved["arch"]["num_envs"] = 16
    (copy / "config.json").write_text(json.dumps(saved))
    os.symlink(trained_run / "checkpoints", copy / "checkpoints")
    assert_one_line_error(*run_main(capsys, "train", "--resume", copy), "arch.num_envs is 16 but was 8")


def test_wandb_without_wandb_installed_is_a_user_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, installed or not
    code, out = run_main(capsys, "train", "ppo-catch-anakin", "--log.wandb", "--run-dir", tmp_path / "r")
    assert_one_line_error(code, out, "log.wandb is set but wandb is not installed")
    assert not (tmp_path / "r").exists()


def write_fake_run(run_dir, seeds, shift):
    run_dir.mkdir()
    rng = np.random.default_rng(int(10 * shift))
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(1, 31):
            returns = [float(min(500, 18 * i * (1 + shift) + rng.normal(0, 20))) for _ in range(seeds)]
            row = {"env_steps": 16384 * i, "sps": 1e4, "wall_s": 2.0 * i, "episode_return": float(np.mean(returns)),
                   "episode_return_per_seed": returns}
            f.write(json.dumps(row) + "\n")


def test_plot_draws_runs_and_seeds(tmp_path, capsys):
    write_fake_run(tmp_path / "a", 4, 0.0)
    write_fake_run(tmp_path / "b", 4, 0.3)
    out = tmp_path / "fig" / "curves.png"
    main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--labels", "PPO", "PPO fast"])
    assert out.stat().st_size > 20_000
    assert_one_line_error(*run_main(capsys, "plot", tmp_path / "a", "--out", out, "--labels", "x", "y"),
                          "2 labels for 1 runs")
    assert_one_line_error(*run_main(capsys, "plot", tmp_path / "none", "--out", out), "has no metrics.jsonl")
    assert_one_line_error(*run_main(capsys, "plot", tmp_path / "a", "--out", tmp_path / "curves.txt"),
                          "write a .png, .pdf or .svg file")
    assert len(podracer_plot(str(tmp_path / "a")).axes) == 2  # one run given as a path, not a list


def test_plot_reads_rows_with_missing_returns_and_refuses_foreign_rows(tmp_path, capsys):
    """A multi-seed run's row without per-seed returns counts as NaN for every seed (not a
    ragged-array traceback), a run in which no episode ended yet draws no curve and no legend
    warning, and a row without env_steps or wall_s is a one-line error naming it."""
    import warnings

    from experiments.plot import read_curves

    run = tmp_path / "seeds"
    run.mkdir()
    rows = [{"env_steps": 100 * i, "wall_s": float(i), "episode_return": 2.0, "episode_return_per_seed": [1.0, 3.0]}
            for i in (1, 2)] + [{"env_steps": 300, "wall_s": 3.0, "episode_return": None}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    np.testing.assert_array_equal(read_curves(str(run)).returns, [[1.0, 1.0, np.nan], [3.0, 3.0, np.nan]])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text(json.dumps({"env_steps": 100, "wall_s": 1.0, "episode_return": None}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert podracer_plot(str(empty)).axes[0].get_legend() is None
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "metrics.jsonl").write_text('{"env_steps": 100, "episode_return": 1.0}\n')
    assert_one_line_error(*run_main(capsys, "plot", foreign, "--out", tmp_path / "f.png"),
                          "row 1 has no wall_s")


def test_plot_keeps_different_runs_with_the_same_directory_name_apart(tmp_path):
    """Without --labels, `sweep1/ppo` and `sweep2/ppo` are two curves (labelled by their
    paths), not pooled into one as runs given the same label are; the same run twice is one."""
    (tmp_path / "sweep1").mkdir()
    (tmp_path / "sweep2").mkdir()
    write_fake_run(tmp_path / "sweep1" / "ppo", 1, 0.0)
    write_fake_run(tmp_path / "sweep2" / "ppo", 1, 0.3)
    runs = [str(tmp_path / "sweep1" / "ppo"), str(tmp_path / "sweep2" / "ppo") + "/"]
    labels = [line.get_label() for line in podracer_plot(runs).axes[0].lines]
    assert labels == [os.path.normpath(run) for run in runs]
    assert [line.get_label() for line in podracer_plot([runs[0], runs[0]]).axes[0].lines] == ["ppo (n=2)"]


def podracer_plot(*args, **kwargs):
    import podracer

    return podracer.plot(*args, **kwargs)


def test_signals_set_the_stop_request_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert stop() and stop.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
    # A terminal's Ctrl-C reaches every process of `launch-local`, whose SIGTERM follows: the
    # stop stays named after the first signal.
    with stop_on_signals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert stop.name == "SIGINT"


@pytest.mark.timeout(60)
@pytest.mark.costly
def test_cartpole_episode_renders_to_frames():
    from experiments.evaluate import Policy, record_episode

    env = make_jax_env("CartPole-v1")
    push_right = lambda params, obs, key, core, start: (jax.numpy.ones(obs.shape[0], jax.numpy.int32), core)  # noqa: E731
    frames, episode_return = record_episode(env, Policy(push_right, lambda batch: (None, None)), None,
                                            jax.random.key(0))
    assert frames.dtype == np.uint8 and frames.shape[1:] == (200, 300, 3)
    assert 5 < len(frames) < 100  # the pole falls: the episode ends early
    assert not np.array_equal(frames[0], frames[-1])
    assert episode_return == len(frames) - 1  # CartPole: a reward of 1 per step drawn
    capped, capped_return = record_episode(env, Policy(push_right, lambda batch: (None, None)), None,
                                           jax.random.key(0), max_steps=3)
    np.testing.assert_array_equal(capped, frames[:4])  # evaluate's --max-steps bounds a video too
    assert capped_return == 3


def test_default_run_dirs_are_never_shared(tmp_path):
    """Runs started in the same second get their own default directories (`-2`, ...), and
    one that another run claimed in the meantime is refused rather than shared."""
    first = run_dir_lib.default_run_dir("ppo", root=str(tmp_path))
    os.makedirs(first)
    second = run_dir_lib.default_run_dir("ppo", root=str(tmp_path))
    assert second != first and os.path.basename(second).startswith(os.path.basename(first))
    run_dir_lib.prepare_run_dir(first, TINY, defaulted=True)
    with pytest.raises(ConfigError, match="taken by another run started at the same moment"):
        run_dir_lib.prepare_run_dir(first, TINY, defaulted=True)
    run_dir_lib.prepare_run_dir(first, TINY)  # a directory the user names may be reused (no checkpoints)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_stopped_run_names_the_command_that_resumes_it(processes, tmp_path, capsys, monkeypatch):
    """The stop line's command continues the run on what it ran on: the same fake CPU
    devices (here 4) and, for a multi-process run, the same processes; `podracer train
    --resume DIR` alone would meet a checkpoint of other per-device shapes (DQN's buffers)."""
    from podracer import distributed

    class Stopped(NamedTuple):
        stopped: bool
        env_steps: int
        run_dir: str

    monkeypatch.setattr(train_lib, "train", lambda config, **kwargs: Stopped(True, 128, str(tmp_path)))
    monkeypatch.setattr(distributed, "process_count", lambda: processes)
    code, out = run_main(capsys, "train", *TINY_ARGS)
    assert code == 128 + signal.SIGTERM
    expected = (f"podracer train --resume {tmp_path} --cpu-devices 4" if processes == 1 else
                f"podracer launch-local -n 2 --cpu-devices 4 --resume {tmp_path}")
    assert f"continue with: {expected}" in out.err, out.err


def test_a_run_that_cannot_learn_is_warned_about():
    """A replay agent whose `learning_starts` is not below the budget takes no gradient step
    (its rows' losses read 0.0): `train` warns, naming both numbers; a run that learns does
    not. A warning, not an error: filling a buffer without learning is a use (tests do)."""
    import warnings

    import podracer
    from experiments.train import warn_if_no_learning

    with pytest.warns(UserWarning, match=r"agent.learning_starts \(10000\) is above the 4960 env steps"):
        warn_if_no_learning(podracer.presets.get("dqn-cartpole-anakin", total_env_steps=5000))
    # A budget that rounds down to whole updates (80 env steps each) below learning_starts.
    with pytest.warns(UserWarning, match=r"agent.learning_starts \(10050\) is above the 10000 env steps"):
        warn_if_no_learning(podracer.presets.get("dqn-cartpole-anakin", total_env_steps=10079,
                                                 agent=dict(learning_starts=10050)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_no_learning(podracer.presets.get("dqn-cartpole-anakin"))
        # Equal: the last update reaches learning_starts and learns (DQN's `env_steps.ge`).
        warn_if_no_learning(podracer.presets.get("dqn-cartpole-anakin", total_env_steps=10000))
        warn_if_no_learning(podracer.presets.get("ppo-cartpole-anakin", total_env_steps=10))


@pytest.mark.parametrize("kwargs, name", [
    (dict(episodes=2.5), "episodes"), (dict(episodes=True), "episodes"), (dict(max_steps=2.5), "max_steps"),
    (dict(seed=1.5), "seed"), (dict(agent_seed="0"), "agent_seed"), (dict(step="39"), "step"),
])
def test_python_evaluate_refuses_numbers_that_are_not_integers(tmp_path, kwargs, name):
    """podracer.evaluate from Python checks its counts as the command line's argparse does,
    before reading the run: max_steps=2.5 ran episodes of 2 steps, step="39" was "no checkpoint
    of update 39 (it keeps updates 39)", episodes=2.5 or seed=1.5 crashed inside JAX."""
    from experiments.evaluate import evaluate

    with pytest.raises(ConfigError, match=f"^{name} must be an integer"):
        evaluate(str(tmp_path), **kwargs)
