"""`podracer bench table`: presets x seeds trained to milestones, evaluated, tabulated; the
MinAtar presets; the published numbers beside podracer's."""

import json

import pytest

from experiments.benchmarks import report, table
from experiments.benchmarks.published import published
from experiments.presets import PRESETS
from experiments.presets_common import MINATAR_GAMES
from podracer.agents import PPOConfig, PQNConfig
from podracer.config import ConfigError
from tests.support.helpers import run_main

TINY = ["--seeds", "2", "--total-env-steps", "2048", "--milestones", "0.3", "1", "--episodes", "4",
        "--arch.num-envs", "8", "--arch.rollout-length", "16", "--arch.updates-per-call", "4",
        "--agent.num-minibatches", "2"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_table_end_to_end_on_a_tiny_budget(tmp_path, capsys, monkeypatch):
    """PQN on Catch, 2 seeds in one program, evaluated (greedy) at 30% and 100% of a
    2048-step budget: the run stops after the host call that reaches the milestone (512
    env steps per call: 1024), resumes, and ends at 2048; a second invocation finds
    everything done and trains nothing, also after the directory moved; another config,
    or other milestones, episodes or evaluation policy, in the same directory are refused."""
    out = tmp_path / "bench"
    name = "pqn-catch-anakin"
    code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", str(out), *TINY)
    assert code == 0, output.err
    record = json.loads((out / "runs" / name / "bench.json").read_text())
    assert record["policy"] == "greedy" and record["seeds"] == 2 and record["algorithm"] == "pqn"
    assert [e["env_steps"] for e in record["evaluations"]] == [1024, 2048]
    for e in record["evaluations"]:
        assert len(e["returns"]) == 2 and all(-1.0 <= r <= 1.0 for r in e["returns"])
    rows = (out / "runs" / name / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["env_steps"] for r in rows] == [512, 1024, 1536, 2048]
    markdown = (out / "results.md").read_text()
    assert f"| `{name}` | Catch | 2 |" in markdown
    assert "~614" in markdown and "@1,024" in markdown and "~2,048" in markdown
    assert (out / "Catch.png").stat().st_size > 0 and json.loads((out / "results.json").read_text())

    before = (out / "runs" / name / "metrics.jsonl").read_text()
    code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", str(out), *TINY)
    assert code == 0 and (out / "runs" / name / "metrics.jsonl").read_text() == before
    assert output.out.strip().splitlines() == [f"wrote {out / 'results.md'}"]

    code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", str(out), *TINY[2:], "--seeds", "3")
    assert code == 2 and "another config (arch.num_seeds)" in output.err and len(output.err.strip().splitlines()) == 1

    # Moved, and named relatively: the same benchmark, continued (nothing trained again).
    (tmp_path / "moved").mkdir()
    out.rename(tmp_path / "moved" / "bench")
    monkeypatch.chdir(tmp_path / "moved")
    code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", "bench", *TINY)
    assert code == 0, output.err
    assert (tmp_path / "moved" / "bench" / "runs" / name / "metrics.jsonl").read_text() == before

    # Other evaluation settings would mix into the table or evaluate a milestone already passed.
    for option, value in (("--episodes", "8"), ("--policy", "sample")):
        code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", "bench", *TINY, option, value)
        assert code == 2 and f"was evaluated with {option}" in output.err, output.err
    argv = [*TINY[:5], "0.2", "1", *TINY[7:]]  # --milestones 0.2 1
    code, output = run_main(capsys, "bench", "table", "--presets", name, "--out", "bench", *argv)
    assert code == 2 and "was evaluated at milestones of 614, 2,048 env steps, not 410, 2,048" in output.err, \
        output.err


def test_auto_policy_samples_actor_critics_and_is_greedy_for_q_learning():
    assert table.evaluation_policy("auto", PRESETS["ppo-catch-anakin"]()) == "sample"
    assert table.evaluation_policy("auto", PRESETS["pqn-catch-anakin"]()) == "greedy"
    assert table.evaluation_policy("greedy", PRESETS["ppo-catch-anakin"]()) == "greedy"


@pytest.mark.parametrize("argv, message", [
    (["--presets", "ppo-catch-anakinn", "--out", "x"], "unknown preset 'ppo-catch-anakinn'"),
    (["--presets", "ppo-cartpole-sebulba", "--out", "x"], "bench table trains Anakin presets"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--milestones", "0.5", "0.2"], "--milestones must increase"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--milestones", "1e9"], "--milestones: 1000000000.0"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--seeds", "0"], "--seeds must be >= 1"),
    (["--presets", "ppo-catch-anakin"], "bench table needs --presets"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--agent.learning-rat", "1"], "unknown field"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--arch.num-seeds", "3"], "--arch.num-seeds: bench table sets it"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--run-dir", "y"], "--run-dir applies to bench prefix, not"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--json"], "--json applies to bench anakin, sebulba and prefix"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--log.console", "true"], "--log.console: bench table sets it"),
    (["--presets", "ppo-catch-anakin", "--out", "x", "--checkpoint.every-updates", "1"],
     "--checkpoint.every-updates: bench table sets it"),
])
def test_table_user_errors_exit_2_before_training(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, output = run_main(capsys, "bench", "table", *argv)
    assert code == 2 and message in output.err, output.err
    assert not (tmp_path / "x" / "runs").exists()


def test_published_column_and_milestones():
    """gymnax-blines' PPO numbers appear beside MinAtar PPO rows near their env steps only."""
    assert published("ppo", "SpaceInvaders-MinAtar", 5_111_808).value == 92.7
    assert published("ppo", "Breakout-MinAtar", 9_961_472).value == 22.9
    assert published("ppo", "Breakout-MinAtar", 3_000_000) is None
    assert published("pqn", "Breakout-MinAtar", 1_300_000) is None
    record = {"preset": "ppo-breakout-minatar-anakin", "env": "Breakout-MinAtar", "algorithm": "ppo", "seeds": 4,
              "episodes": 128, "policy": "sample", "sps": 1234.0,
              "evaluations": [{"target": 1_300_000, "env_steps": 1_310_720, "returns": [10.0, 12.0, 14.0, 16.0],
                               "train_wall_s": 600.0}]}
    header, rows, sources = report.table_rows([record])
    assert header[3:5] == ["~1.3M", "published"]
    assert rows[0][3:5] == ["13.0 ± 1.3 @1.3M", "15.7"] and rows[0][-2:] == ["10.0 min", "1,234"]
    assert "gymnax-blines" in sources[0]
    config = PRESETS["ppo-breakout-minatar-anakin"]()
    assert table.milestone_steps(config, table.DEFAULT_MILESTONES) == [1_300_000, 5_100_000, 9_900_000]
    with pytest.raises(ConfigError, match="milestones"):
        table.milestone_steps(config, [0.0])


def test_minatar_presets():
    """PPO with gymnax-blines' settings (a measured learning rate where theirs learns slowly)
    and PQN with the paper's, on the four games, 10M steps; PPO with V-trace and replay
    keeps gymnax-blines' learning rate."""
    from experiments.presets_ppo import MINATAR_PPO_LEARNING_RATES

    assert MINATAR_PPO_LEARNING_RATES == {"Breakout-MinAtar": 1e-3, "Asterix-MinAtar": 1e-3}
    for game, env_id in MINATAR_GAMES.items():
        ppo, pqn = PRESETS[f"ppo-{game}-minatar-anakin"](), PRESETS[f"pqn-{game}-minatar-anakin"]()
        assert ppo.env.id == pqn.env.id == env_id and ppo.total_env_steps == pqn.total_env_steps == 10_000_000
        assert isinstance(ppo.agent, PPOConfig) and isinstance(pqn.agent, PQNConfig)
        assert (ppo.arch.num_envs, ppo.arch.rollout_length, ppo.agent.num_epochs, ppo.agent.num_minibatches) == \
            (64, 128, 4, 8)
        assert (ppo.agent.gamma, ppo.agent.learning_rate, ppo.agent.entropy_coef, ppo.agent.hidden_sizes) == \
            (0.999, MINATAR_PPO_LEARNING_RATES.get(env_id, 5e-4), 0.01, (256, 256))
        if game in ("breakout", "space-invaders"):
            assert PRESETS[f"ppo-vtrace-replay-{game}-minatar-anakin"]().agent.learning_rate == 5e-4
        assert (pqn.arch.num_envs, pqn.arch.rollout_length, pqn.agent.num_epochs, pqn.agent.num_minibatches) == \
            (128, 32, 2, 32)
        assert pqn.agent.q_lambda == 0.65 and pqn.agent.layer_norm and pqn.agent.torso == "minatar_cnn"


@pytest.mark.parametrize("milestones", [[float("nan")], [float("inf")], [0.5, float("nan")]])
def test_non_finite_milestones_are_a_config_error(milestones):
    """`--milestones nan` or `inf` is refused naming --milestones, not a ValueError or
    OverflowError from converting it to env steps."""
    with pytest.raises(ConfigError, match="--milestones"):
        table.milestone_steps(PRESETS["ppo-cartpole-anakin"](), milestones)


def test_a_run_continues_only_with_the_milestones_it_was_evaluated_at(tmp_path):
    """`bench.json` keeps the milestones (env steps) of its run: another list is refused, as
    is, for a record of an earlier version that kept only its evaluations, a list that drops
    one of them or adds one the run has already trained past (it would be evaluated at a
    later checkpoint); one that adds a later milestone continues."""
    def record(evaluated, targets=None):
        data = {"evaluations": [{"target": t} for t in evaluated], "episodes": 4, "policy": "greedy"}
        if targets is not None:
            data["targets"] = targets
        (tmp_path / "bench.json").write_text(json.dumps(data))

    check = lambda targets: table._check_same_evaluation(str(tmp_path), targets, 4, "greedy")  # noqa: E731
    record([100], [100, 400])
    check([100, 400])
    for other in ([100, 300], [100], [50, 100, 400]):
        with pytest.raises(ConfigError, match="evaluated at milestones of 100, 400 env steps"):
            check(other)
    record([100, 200])  # an earlier version's record
    check([100, 200, 400])
    for other in ([100, 400], [50, 100, 200], [100, 150, 200]):
        with pytest.raises(ConfigError, match="evaluated at milestones of 100, 200 env steps"):
            check(other)
    with pytest.raises(ConfigError, match="--episodes 4, not 8"):
        table._check_same_evaluation(str(tmp_path), [100, 200], 8, "greedy")
    (tmp_path / "bench.json").unlink()
    check([1, 2, 3])  # nothing evaluated yet: any milestones


def test_the_table_refuses_overrides_of_the_settings_it_decides(tmp_path):
    """From Python too (`run_table(overrides=...)`): `run_dir`, `arch.num_seeds`,
    `log.console` and `checkpoint.every_updates` are the benchmark's, named in one line."""
    for override in (["--run-dir", "y"], ["--arch.num-seeds", "2"], ["--log.console=false"],
                     ["--checkpoint.every-updates", "0"]):
        with pytest.raises(ConfigError, match=f"{override[0].split('=')[0]}: bench table sets it"):
            table.run_table(["ppo-catch-anakin"], 2, str(tmp_path / "x"), override)
    assert not (tmp_path / "x").exists()
