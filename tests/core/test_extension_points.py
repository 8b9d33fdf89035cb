"""The core's extension points, used as a user's package would: environment-id families in
JAX and host forms (`podracer.envs.families`), torsos by name with their options
(`podracer.networks.registry`), and the command line's registered commands, benchmarks and error types
(`experiments.commands`)."""

import argparse

import flax.linen as nn
import jax
import numpy as np
import pytest

from experiments import commands
from podracer.agents import DQNConfig, dqn
from podracer.config import ConfigError, EnvConfig
from podracer.envs import (
    Catch,
    UnknownEnvError,
    families,
    jax_env_ids,
    make_configured_jax_env,
    make_jax_env,
    register_host_env_family,
    register_jax_env,
    register_jax_env_family,
)
from podracer.envs.host import host_backend, host_env_specs
from podracer.networks.registry import register_torso, registered_torsos
from podracer.plugins import load_plugins
from podracer.types import DiscreteSpec, ObsSpec
from tests.support.helpers import WideOptions


@pytest.fixture
def fresh_registries(monkeypatch):
    """Registrations made by a test are forgotten after it. The installed plugins load first:
    loaded during the test, into the copies, they would be forgotten with its registrations
    while the process counts them as loaded."""
    import podracer.networks.registry

    load_plugins()
    monkeypatch.setattr(families, "_JAX_FAMILIES", dict(families._JAX_FAMILIES))
    monkeypatch.setattr(families, "_HOST_FAMILIES", dict(families._HOST_FAMILIES))
    monkeypatch.setattr(podracer.networks.registry, "_TORSOS", dict(podracer.networks.registry._TORSOS))
    monkeypatch.setattr(commands, "_COMMANDS", dict(commands._COMMANDS))
    monkeypatch.setattr(commands, "_BENCH_COMMANDS", dict(commands._BENCH_COMMANDS))
    monkeypatch.setattr(commands, "_ERRORS", list(commands._ERRORS))


def make_tall_catch(env_id: str, params: tuple[str, ...]) -> Catch:
    """`TallCatch-<rows>`, its columns set by `env.params` (`columns=3`)."""
    rows = int(env_id.removeprefix("TallCatch-"))
    options = dict(item.split("=") for item in params)
    if set(options) - {"columns"}:
        raise ValueError(f"TallCatch has no option {sorted(set(options) - {'columns'})}")
    if rows < 2:
        raise ValueError(f"environment {env_id!r}: rows must be >= 2")
    return Catch(rows, int(options.get("columns", 5)))


def test_a_jax_id_family_builds_every_id_of_its_pattern(fresh_registries):
    register_jax_env_family("TallCatch-<rows>", r"TallCatch-\d+", make_tall_catch, examples=("TallCatch-12",))
    assert "TallCatch-12" in jax_env_ids()
    env = make_jax_env("TallCatch-7")
    assert (env.rows, env.columns) == (7, 5)
    env = make_configured_jax_env(EnvConfig("TallCatch-7", params=("columns=3",)))
    assert (env.rows, env.columns) == (7, 3)
    with pytest.raises(UnknownEnvError, match="rows must be >= 2"):
        make_jax_env("TallCatch-1")
    with pytest.raises(ConfigError, match="env.params: TallCatch has no option"):
        make_configured_jax_env(EnvConfig("TallCatch-7", params=("depth=3",)))
    with pytest.raises(UnknownEnvError):
        make_jax_env("TallCatch-many")  # not of the pattern
    with pytest.raises(ValueError, match="built-in environment id"):
        register_jax_env("TallCatch-3", Catch)  # a family's id is taken
    with pytest.raises(ValueError, match="already registered"):
        register_jax_env_family("TallCatch-<rows>", r"TallCatch-\d+", make_tall_catch)


class _CatchHostEnv:
    """A stand-in host environment that only carries what `make` was given."""

    def __init__(self, env_id, num_envs, seed, max_episode_steps, params):
        self.made = (env_id, num_envs, seed, max_episode_steps, params)


def test_a_host_id_family_is_chosen_whatever_the_backend(fresh_registries):
    specs = (ObsSpec((3,), np.float32), DiscreteSpec(2))
    register_host_env_family("tallcatch", lambda env_id: env_id.startswith("HostCatch-"), _CatchHostEnv,
                             lambda env_id, max_steps, params: specs, examples=("HostCatch-1",),
                             description="HostCatch-<n> (a test's)")
    config = EnvConfig("HostCatch-4", backend="gymnasium", params=("columns=3",))
    assert host_backend(config) == "tallcatch" and host_env_specs(config) == specs
    from podracer.envs.host import host_env_ids, make_host_env

    assert "HostCatch-1" in host_env_ids()
    assert make_host_env(config, 8, 3).made == ("HostCatch-4", 8, 3, None, ("columns=3",))
    with pytest.raises(ValueError, match="built-in host backend"):
        register_host_env_family("envpool", "x", _CatchHostEnv, lambda *args: specs)


class WideMLP(nn.Module):
    width: int

    @nn.compact
    def __call__(self, obs):
        return nn.relu(nn.Dense(self.width)(obs))


def test_a_registered_torso_takes_its_options_from_the_config(fresh_registries):
    register_torso("wide", WideOptions, lambda options, obs_spec, action_spec: WideMLP(options.width))
    assert "wide" in registered_torsos()
    config = DQNConfig(torso="wide", torso_options=("width=24",))
    network = dqn.make_q_network(config, ObsSpec((3,), np.float32), DiscreteSpec(2))
    params = network.init(jax.random.key(0), np.zeros((1, 3), np.float32))
    assert network.apply(params, np.zeros((5, 3), np.float32)).shape == (5, 2)  # DQN's head on the features
    assert {leaf.shape for leaf in jax.tree.leaves(params)} >= {(3, 24)}
    # A torso that outputs action values itself is the whole Q-network: no head on top.
    register_torso("q-values", WideOptions, lambda options, obs_spec, action_spec: WideMLP(action_spec.num_actions),
                   outputs="action_values")
    network = dqn.make_q_network(DQNConfig(torso="q-values"), ObsSpec((3,), np.float32), DiscreteSpec(2))
    params = network.init(jax.random.key(0), np.zeros((1, 3), np.float32))
    assert [leaf.shape for leaf in jax.tree.leaves(params)] == [(2,), (3, 2)]  # its one Dense layer
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    dense = params["params"]["Dense_0"]
    np.testing.assert_allclose(network.apply(params, x), np.maximum(x @ dense["kernel"] + dense["bias"], 0), rtol=1e-6)
    with pytest.raises(ConfigError, match="agent.torso_options: width must be >= 1"):
        DQNConfig(torso="wide", torso_options=("width=0",))
    with pytest.raises(ConfigError, match="agent.torso_options: width must be an integer"):
        DQNConfig(torso="wide", torso_options=("width=wide",))
    with pytest.raises(ConfigError, match="agent.torso"):
        DQNConfig(torso="narrow")
    with pytest.raises(ValueError, match="built-in"):
        register_torso("mlp", WideOptions, lambda *args: None)


class ToyFailure(RuntimeError):
    pass


def test_registered_commands_run_and_their_errors_are_one_line(fresh_registries, capsys):
    from experiments.cli import main

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--times", type=int, default=1)

    def run(args: argparse.Namespace) -> int:
        if args.times < 0:
            raise ToyFailure("cannot repeat\na negative number of times")
        print("hello " * args.times)
        return 0

    commands.register_command(commands.Command("hello", add_arguments, run, help="say hello"))
    commands.register_bench_command(commands.BenchCommand(
        "echo", lambda parser: parser.add_argument("--echo-words", type=int, default=0),
        lambda args, overrides: print("bench", args.echo_words, overrides), reads=("echo_words",)))
    commands.register_command_error(ToyFailure, status=1, describe=lambda error: f"toy: {error}")
    main(["hello", "--times", "2"])
    assert capsys.readouterr().out.strip() == "hello hello"
    main(["bench", "echo", "--echo-words", "3", "--seed", "1"])
    assert capsys.readouterr().out.strip() == "bench 3 ['--seed', '1']"
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "anakin", "--echo-words", "3"])
    assert exit_info.value.code == 2 and "--echo-words applies to bench echo" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["hello", "--times", "-1"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "podracer: error: toy: cannot repeat a negative number of times\n"
    with pytest.raises(ValueError, match="built-in"):
        commands.register_command(commands.Command("train", add_arguments, run))
