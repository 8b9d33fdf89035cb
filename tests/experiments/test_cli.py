"""The `podracer` command: listing, overrides, and user errors (exit 2, one line)."""

import json
import os
import subprocess
import sys

import pytest

from experiments.cli import main
from experiments.overrides import OverrideError, apply_overrides
from experiments.presets import PRESETS
from podracer.config import ConfigError
from tests.support.helpers import TINY_ARGS, assert_one_line_error, run_main, subprocess_env


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "ppo-cartpole-anakinn"], "unknown preset 'ppo-cartpole-anakinn'; did you mean ppo-cartpole-anakin?"),
        (["train", "ppo-cartpole-anakin", "--agent.learning-rat", "1"], "unknown field 'agent.learning_rat'"),
        # a field of the same section first, or by its initials: `agent.lr` used to suggest --agent.core
        (["train", "ppo-cartpole-anakin", "--agent.lr", "1"], "unknown field 'agent.lr'; did you mean --agent.learning-rate?"),
        (["train", "ppo-cartpole-anakin", "--agent.ent-coef", "1"], "did you mean --agent.entropy-coef?"),
        (["train", "ppo-cartpole-anakin", "--learning-rate", "1"], "did you mean --agent.learning-rate?"),
        (["train", "ppo-cartpole-anakin", "--agent.learning-rate", "-1"], "agent.learning_rate must be > 0"),
        (["train", "ppo-cartpole-anakin", "--agent.learning-rate", "fast"], "agent.learning_rate expects float"),
        (["train", "ppo-cartpole-anakin", "--total-env-steps", "-5"], "total_env_steps must be > 0"),
        (["train", "ppo-cartpole-anakin", "--agent.learning-rate", "inf"], "agent.learning_rate must be finite, got inf"),
        (["train", "ppo-cartpole-anakin", "--agent.max-grad-norm", "1e999"], "agent.max_grad_norm must be finite"),
        (["train", "ppo-cartpole-anakin", "--arch.num-envs", "6"], "arch.num_envs must be divisible by the number of devices (4)"),
        (["train", "ppo-cartpole-anakin", "--env.id", "CartPole-v0"], "env.id: unknown JAX environment 'CartPole-v0'"),
        (["train", "ppo-cartpole-anakin", "--arch.devices", "0,9"], "arch.devices names device 9"),
        (["train", "ppo-cartpole-anakin", "--agent.activation", "sigmoid"], "agent.activation must be one of"),
        (["train", "ppo-cartpole-anakin", "--log.console", "maybe"], "log.console expects bool"),
        (["train", "ppo-cartpole-anakin", "--run-dir", "/proc/podracer-test"], "run_dir '/proc/podracer-test' is not writable"),
        (["train", "ppo-cartpole-anakin", "--agent.torso", "nature_cnn"], "agent.torso 'nature_cnn' needs image observations"),
        (["train", "pqn-breakout-minatar-anakin", "--env.id", "CartPole-v1"], "agent.torso 'minatar_cnn' needs image observations"),
        (["train", "ppo-breakout-minatar-anakin", "--agent.torso", "nature_cnn"], "needs images of at least 36x36"),
        (["train", "ppo-cartpole-anakin", "--seed", "4294967296"], "seed must be < 2**32"),
        (["train", "ppo-cartpole-anakin", "--arch.updates-per-call", "1e10"], "arch.updates_per_call must be < 2**31"),
        (["plot", "runs/a", "--out", "a.png", "--smooth", "0"], "--smooth must be >= 1 (rows averaged), got 0"),
        (["plot", "runs/a", "--out", "a.png", "--smooth", "-2"], "--smooth must be >= 1 (rows averaged), got -2"),
        # sequence buffers too large for int32 positions: a ValueError (a traceback) at setup or init
        (["train", "muzero-catch-anakin", "--agent.buffer-size", "3e9"],
         "agent.buffer_size must be <= 2147479551 to sample 64 sequences exactly"),
        (["train", "impala-replay-breakout-minatar-anakin", "--agent.replay-capacity", "2147483647"],
         "agent.replay_capacity must be <= 2147483391 to sample 16 sequences per update exactly"),
        (["bench", "sebulbaa"], "invalid choice"),
        (["bench", "sebulba", "--seconds", "0"], "--seconds must be a positive number of seconds, got 0.0"),
        (["bench", "sebulba", "--seconds", "-1"], "--seconds must be a positive number of seconds, got -1.0"),
        (["bench", "sebulba", "--seconds", "nan"], "--seconds must be a positive number of seconds, got nan"),
        (["launch-local", "-n", "1", "--cpu-devices", "0", "ppo-cartpole-anakin"], "--cpu-devices must be >= 1, got 0"),
        (["launch-local", "-n", "2", "--cpu-devices", "-3", "ppo-cartpole-anakin"], "--cpu-devices must be >= 1, got -3"),
        (["train", "ppo-pendulum-anakin", "--agent.log-std-init", "90"], "agent.log_std_init must be in [-20, 20], got 90.0"),
        (["launch-local", "-n", "2", "ppo-cartpole-anakin", "--distributed.num-processes", "3"],
         "--distributed.num-processes: launch-local sets the coordinator, the number of processes"),
        (["launch-local", "-n", "2", "ppo-cartpole-anakin", "--distributed.process_id=1"],
         "--distributed.process_id: launch-local sets"),
    ],
)
def test_user_errors_exit_2_with_one_line(capsys, argv, message):
    assert_one_line_error(*run_main(capsys, *argv), message)


@pytest.mark.timeout(60)
def test_cpu_devices_splits_the_cpu_before_jax_starts():
    """`--cpu-devices N` must take effect in a fresh process (here: 3 devices, so device 5
    is a config error naming the count), before anything is compiled."""
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "ppo-cartpole-sebulba", "--cpu-devices", "3",
                           "--arch.learner-devices", "5"], capture_output=True, text=True, env=subprocess_env(), timeout=55)
    assert done.returncode == 2
    assert "arch.learner_devices names device 5 but only 3 exist" in done.stderr, done.stderr


@pytest.mark.timeout(60)
@pytest.mark.costly
def test_cpu_devices_take_effect_with_a_user_module_that_starts_jax(tmp_path):
    """A `PODRACER_IMPORT` module may run JAX at import (a `jnp` constant): the command sets
    `--cpu-devices` first, so the count still applies (it used to be a RuntimeError traceback:
    jax_num_cpu_devices set after the backend started)."""
    (tmp_path / "eager_plugin.py").write_text("import jax.numpy as jnp\nTABLE = jnp.arange(4)\n")
    env = dict(subprocess_env(), PODRACER_IMPORT="eager_plugin")
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "ppo-cartpole-sebulba", "--cpu-devices", "3",
                           "--arch.learner-devices", "5"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=55)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "arch.learner_devices names device 5 but only 3 exist" in done.stderr, done.stderr


@pytest.mark.timeout(60)
@pytest.mark.costly
def test_coordinator_auto_outside_a_cluster_is_a_user_error(tmp_path):
    """`--distributed.coordinator auto` where JAX finds no cluster (no SLURM, Open MPI or
    TPU pod): one line naming the field, exit 2, no run directory; in a fresh process, as
    joining a cluster must come before JAX's backends start."""
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "ppo-cartpole-anakin", "--run-dir",
                           str(run_dir), "--distributed.coordinator", "auto", "--distributed.timeout-s", "5"],
                          capture_output=True, text=True, env=env, timeout=55)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith("podracer: error: distributed.coordinator: 'auto' found no cluster"), done.stderr
    assert not run_dir.exists()


def test_unwritable_run_dir_fails_before_compiling(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out = run_main(capsys, "train", "ppo-catch-anakin", "--run-dir", str(blocker / "run"))
    assert code == 2 and "not writable" in out.err


def test_overrides_parse_each_type():
    config = apply_overrides(
        PRESETS["ppo-cartpole-anakin"](),
        ["--seed=3", "--agent.hidden-sizes", "32", "16", "--arch.devices", "0,1", "--log.tensorboard", "false",
         "--log.console", "--total-env-steps", "1e5", "--run-dir", "none"],
    )
    assert config.seed == 3 and config.total_env_steps == 100_000
    assert config.agent.hidden_sizes == (32, 16) and config.arch.devices == (0, 1)
    assert config.log.tensorboard is False and config.log.console is True and config.run_dir is None
    with pytest.raises(OverrideError, match="seed expects int"):
        apply_overrides(config, ["--seed", "0.5"])
    with pytest.raises(OverrideError, match="takes one value"):
        apply_overrides(config, ["--seed", "1", "2"])


def test_list_shows_presets(capsys):
    main(["list"])
    out = capsys.readouterr().out
    assert "ppo-cartpole-anakin" in out and "CartPole-v1" in out and "ppo" in out


def test_an_override_is_never_taken_for_an_option_it_abbreviates():
    """`podracer bench prefix ... --seed 1` sets the config's seed: it used to be parsed as
    `bench --seeds 1` (argparse's abbreviations), and the agent trained with seed 0."""
    from experiments.cli_parser import build_parser

    args, rest = build_parser().parse_known_args(["bench", "prefix", "--bits", "16", "--seed", "1", "--out", "d"])
    assert args.seeds == 4 and rest == ["--seed", "1"]
    args, rest = build_parser().parse_known_args(["evaluate", "run", "--episode", "3"])
    assert args.episodes == 100 and rest == ["--episode", "3"]  # then refused as an unexpected argument


@pytest.mark.costly
def test_python_m_podracer_is_the_command_and_tells_its_version():
    """`python -m podracer` runs the `podracer` command; `--version` prints the package's
    version; no command at all shows the commands (exit 2), not only "a command is required"."""
    import podracer

    version = subprocess.run([sys.executable, "-m", "podracer", "--version"], capture_output=True, text=True,
                             env=subprocess_env(), timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"podracer {podracer.__version__}"
    bare = subprocess.run([sys.executable, "-m", "podracer"], capture_output=True, text=True, env=subprocess_env(),
                          timeout=60)
    assert bare.returncode == 2 and "train" in bare.stderr and "evaluate" in bare.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("tiny-run")
@pytest.mark.timeout(180)
def test_train_writes_run_directory(tmp_path):
    """The real console script, end to end, on a small Catch budget: `ppo-catch-anakin`
    overridden into the lifecycle tests' tiny run on 4 devices, so that its program comes
    from (or fills) the compilation cache those tests share."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "train", *map(str, TINY_ARGS), "--log.tensorboard", "true",
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, env=subprocess_env(4), timeout=170,
    )
    assert proc.returncode == 0, proc.stderr
    assert "done:" in proc.stdout
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env"]["id"] == "Catch" and config["total_env_steps"] == 1792
    assert config["arch"]["num_seeds"] == 2 and config["log"]["tensorboard"] is True
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and rows[-1]["env_steps"] == 1792
    for row in rows:
        assert {"env_steps", "sps", "wall_s", "episode_return"} <= set(row)
        assert isinstance(row["env_steps"], int) and row["sps"] > 0
    assert any(name.startswith("events") for name in os.listdir(run_dir / "tensorboard"))


@pytest.fixture
def no_compilation_cache():
    """JAX's cache directory unset for the test (conftest sets one for the session),
    restored after."""
    import jax

    before = jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)
    yield
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_compilation_cache_max_size", before[1])


def test_the_compilation_cache_goes_where_the_user_says(tmp_path, monkeypatch, no_compilation_cache):
    """`$PODRACER_COMPILATION_CACHE` names the directory (created), `off` disables it, the
    default lives under the home directory, a directory that cannot be made is no cache,
    and a cache JAX was already given wins."""
    import jax

    from experiments.cli import use_compilation_cache

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PODRACER_COMPILATION_CACHE", "off")
    assert use_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PODRACER_COMPILATION_CACHE", str(blocker / "cache"))
    assert use_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
    monkeypatch.delenv("PODRACER_COMPILATION_CACHE")
    default = str(tmp_path / "home" / ".cache" / "podracer" / "jax")
    assert use_compilation_cache() == default and os.path.isdir(default)
    assert jax.config.jax_compilation_cache_dir == default
    monkeypatch.setenv("PODRACER_COMPILATION_CACHE", str(tmp_path / "mine"))
    assert use_compilation_cache() == default  # already configured: left as it is
    jax.config.update("jax_compilation_cache_dir", None)
    assert use_compilation_cache() == str(tmp_path / "mine") and (tmp_path / "mine").is_dir()


def test_the_compilation_cache_is_bounded(tmp_path, monkeypatch, no_compilation_cache):
    """The cache podracer sets up keeps under `$PODRACER_COMPILATION_CACHE_MAX_MB` (least
    recently used programs deleted first); a bound the user gave JAX is left as it is; a
    bound that is not a whole number of megabytes >= 1 is a usage error naming it; programs
    an unbounded cache kept get the access times the bounded one needs."""
    import jax
    import jax.numpy as jnp
    from jax._src import compilation_cache

    from experiments.cli import use_compilation_cache

    cache = tmp_path / "cache"
    monkeypatch.setenv("PODRACER_COMPILATION_CACHE", str(cache))
    for bad in ("0", "lots"):
        monkeypatch.setenv("PODRACER_COMPILATION_CACHE_MAX_MB", bad)
        with pytest.raises(SystemExit):
            use_compilation_cache()
    monkeypatch.setenv("PODRACER_COMPILATION_CACHE_MAX_MB", "1")
    cache.mkdir()
    (cache / "jit_old-0123-cache").write_bytes(b"a program an unbounded cache kept")
    assert use_compilation_cache() == str(cache)
    assert (cache / "jit_old-0123-atime").is_file()  # else JAX fails every write to the directory
    assert jax.config.jax_compilation_cache_max_size == 2**20
    min_compile_s = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    compilation_cache.reset_cache()  # JAX opens its cache once per process: this test's settings
    try:
        jax.jit(lambda x: x * 3 + 1)(jnp.float32(1)).block_until_ready()
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_s)
        compilation_cache.reset_cache()
    names = [path.name for path in cache.iterdir()]
    # JAX's bounded (LRU) cache keeps an access time beside each program; the unbounded one does not.
    assert any(name.endswith("-cache") and not name.startswith("jit_old") for name in names), names
    assert all(name.replace("-cache", "-atime") in names for name in names if name.endswith("-cache")), names

    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", 12345)
    monkeypatch.delenv("PODRACER_COMPILATION_CACHE_MAX_MB")
    use_compilation_cache()
    assert jax.config.jax_compilation_cache_max_size == 12345


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_rerun_loads_its_programs_from_the_compilation_cache(tmp_path):
    """`podracer train` fills `$PODRACER_COMPILATION_CACHE`; the same command again finds
    every program it compiles there (it writes no new entry) and trains the same run."""
    cache = tmp_path / "cache"
    env = subprocess_env()
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PODRACER_COMPILATION_CACHE"] = str(cache)
    entries, returns = [], []
    for attempt in range(2):
        run_dir = tmp_path / f"run{attempt}"
        proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", *map(str, TINY_ARGS),
                               "--run-dir", str(run_dir)], capture_output=True, text=True, env=env, timeout=200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        entries.append(sorted(name for name in os.listdir(cache) if name.endswith("-cache")))
        returns.append([json.loads(line)["episode_return"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()])
    assert any(name.startswith("jit_call") for name in entries[0]), entries[0]
    assert entries[1] == entries[0] and returns[1] == returns[0]


def test_overrides_valid_together_apply_in_any_order():
    """Fields that are only valid together are validated together: the README's
    `--agent.latent-size 32 --agent.shared-torso true` (and PPO's replay, which needs
    V-trace) work in either order; a bad combination is still refused, naming the field."""
    base = PRESETS["ppo-cartpole-anakin"]()
    for args in (["--agent.latent-size", "32", "--agent.shared-torso", "true"],
                 ["--agent.shared-torso", "true", "--agent.latent-size", "32"]):
        config = apply_overrides(base, args)
        assert config.agent.latent_size == 32 and config.agent.shared_torso is True
    config = apply_overrides(base, ["--agent.replay-fraction", "0.5", "--agent.advantage", "vtrace", "--seed", "4"])
    assert (config.agent.replay_fraction, config.agent.advantage, config.seed) == (0.5, "vtrace", 4)
    assert apply_overrides(base, ["--seed", "1", "--seed", "2"]).seed == 2
    with pytest.raises(ConfigError, match="agent.shared_torso must be true"):
        apply_overrides(base, ["--agent.latent-size", "32"])


PLUGIN = '''
import jax
import jax.numpy as jnp
import numpy as np

import podracer
from experiments.presets import register_preset
from podracer.envs import JaxEnv, register_jax_env
from podracer.types import DiscreteSpec, ObsSpec


class Walk(JaxEnv):
    name = "Walk"

    def reset_env(self, key, params):
        return jnp.zeros((), jnp.int32), jax.nn.one_hot(0, 4)

    def step_env(self, key, state, action, params):
        state = jnp.clip(state + 2 * action - 1, 0, 3)
        return state, jax.nn.one_hot(state, 4), (state == 3).astype(jnp.float32), state == 3

    def max_episode_steps(self, params):
        return 10

    def observation_spec(self, params):
        return ObsSpec((4,), np.dtype(np.float32))

    def action_spec(self, params):
        return DiscreteSpec(2)


register_jax_env("Walk-v0", Walk)
register_preset("walk-ppo-anakin", lambda: podracer.presets.get(
    "ppo-cartpole-anakin", env=dict(id="Walk-v0"), total_env_steps=256,
    arch=dict(num_envs=4, rollout_length=8, updates_per_call=4), agent=dict(hidden_sizes=(8,)),
    log=dict(console=False, tensorboard=False)))
'''


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_podracer_import_brings_user_envs_and_presets_to_every_command(tmp_path):
    """`PODRACER_IMPORT=module` makes the environments and presets a user module registers
    known to the command line: list shows them, train runs the preset, evaluate reads the
    run back; a module that cannot be imported is one line and exit status 2."""
    (tmp_path / "walk_plugin.py").write_text(PLUGIN)
    env = dict(subprocess_env(), PODRACER_IMPORT="walk_plugin")

    def podracer(*args, environ=env):
        return subprocess.run([sys.executable, "-m", "experiments.cli", *args], cwd=tmp_path, env=environ,
                              capture_output=True, text=True, timeout=200)

    listed = podracer("list")
    assert listed.returncode == 0 and "walk-ppo-anakin" in listed.stdout and "Walk-v0" in listed.stdout
    trained = podracer("train", "walk-ppo-anakin", "--run-dir", "run")
    assert trained.returncode == 0, trained.stderr
    assert json.loads((tmp_path / "run" / "config.json").read_text())["env"]["id"] == "Walk-v0"
    evaluated = podracer("evaluate", "run", "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    without = podracer("evaluate", "run", "--episodes", "2", environ=subprocess_env())
    assert without.returncode == 2 and "Walk-v0" in without.stderr
    missing = podracer("list", environ=dict(env, PODRACER_IMPORT="walk_plugin, no_such_module"))
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "podracer: error: PODRACER_IMPORT: cannot import 'no_such_module': ModuleNotFoundError: "
        "No module named 'no_such_module'"]


def test_register_preset_refuses_builtin_and_taken_names():
    from experiments import presets

    with pytest.raises(ValueError, match="is built-in"):
        presets.register_preset("ppo-cartpole-anakin", PRESETS["ppo-cartpole-anakin"])
    with pytest.raises(TypeError, match="make must be callable"):
        presets.register_preset("mine", None)
    for bad in ("", "two words", "--flag-like"):
        with pytest.raises(ValueError, match="a preset name is a non-empty word"):
            presets.register_preset(bad, PRESETS["ppo-cartpole-anakin"])
    presets.register_preset("mine-for-a-test", PRESETS["ppo-cartpole-anakin"])
    try:
        assert presets.get("mine-for-a-test", seed=3).seed == 3
        with pytest.raises(ValueError, match="already registered"):
            presets.register_preset("mine-for-a-test", PRESETS["ppo-cartpole-anakin"])
        presets.register_preset("mine-for-a-test", PRESETS["ppo-cartpole-anakin"], overwrite=True)
    finally:
        del presets.PRESETS["mine-for-a-test"]
