"""DQN with PrefixRL's convolutional Q-maps (`torso="prefix_conv"`) on the prefix-adder env."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin import AnakinConfig
from experiments.prefix import graph as G
from experiments.prefix import networks as networks_prefix
from experiments.prefix.env import PrefixAdderEnv
from experiments.prefix.front import read_designs
from podracer.agents import DQNConfig, dqn, make_agent
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import DiscreteSpec, ObsSpec

SMALL = dict(torso="prefix_conv", torso_options=("blocks=1", "channels=8"))


def env_batch(env: PrefixAdderEnv, n: int, seed: int = 0):
    """`n` observations of random-start episodes, and the env's specs."""
    keys = jax.random.split(jax.random.key(seed), n)
    _, obs = jax.jit(jax.vmap(lambda k: env.reset_env(k, None)))(keys)
    return obs, env.observation_spec(None), env.action_spec(None)


@pytest.mark.slow
@pytest.mark.parametrize("area_weight", [None, 0.3])
def test_q_values_are_the_scalarised_maps(area_weight):
    """`[B, 2 N^2]` Q-values: the area and delay maps scalarised with the observed w (w
    sampled per episode: channel 4), or averaged when w is fixed (not observed)."""
    env = PrefixAdderEnv(6, area_weight=area_weight, reset="random")
    obs, obs_spec, action_spec = env_batch(env, 5)
    config = DQNConfig(**SMALL)
    network = dqn.make_q_network(config, obs_spec, action_spec)
    params = network.init(jax.random.key(1), obs.obs[:1])
    q = jax.jit(network.apply)(params, obs.obs)
    assert q.shape == (5, 2 * 6 * 6)
    maps = networks_prefix.PrefixQNetwork(1, 8).apply({"params": params["params"]["PrefixQNetwork_0"]}, obs.obs)
    w = obs.obs[:, 0, 0, 4] if area_weight is None else jnp.full((5,), 0.5)
    if area_weight is None:
        assert len(set(np.round(np.asarray(w), 5))) > 1  # the batch really has different weights
    np.testing.assert_allclose(q, w[:, None] * maps[:, 0] + (1 - w[:, None]) * maps[:, 1], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_acting_respects_the_mask():
    """Greedy and epsilon-greedy actions (epsilon 1 and 0) are legal in every state."""
    env = PrefixAdderEnv(6, reset="random")
    obs, obs_spec, action_spec = env_batch(env, 64)
    for epsilon in (1.0, 0.0):
        config = DQNConfig(**SMALL, epsilon_start=epsilon, epsilon_end=epsilon)
        agent = make_agent(config, obs_spec, action_spec, num_updates=1, axis_name=None)
        state = agent.init(jax.random.key(0))
        actions = (jax.jit(agent.act)(state.params, obs, jax.random.key(2))[0],
                   jax.jit(agent.greedy_act)(state.params, obs))
        for action in actions:
            assert bool(jnp.all(jnp.take_along_axis(obs.action_mask, action[:, None], axis=1))), action
    # The unmasked greedy choice would often be illegal: the mask does the work.
    q = dqn.make_q_network(config, obs_spec, action_spec).apply(state.params.online, obs.obs)
    unmasked = jnp.argmax(q, axis=-1)
    assert not bool(jnp.all(jnp.take_along_axis(obs.action_mask, unmasked[:, None], axis=1)))


def test_prefix_conv_needs_a_prefix_env():
    with pytest.raises(ConfigError, match="agent.torso"):
        dqn.make_q_network(DQNConfig(**SMALL), ObsSpec((4,), jnp.float32), DiscreteSpec(2))
    with pytest.raises(ConfigError, match="agent.torso_options: channels must be > 0"):
        DQNConfig(torso="prefix_conv", torso_options=("channels=0",))
    with pytest.raises(ConfigError, match="agent.torso_options: torso 'prefix_conv' has no option 'width'"):
        DQNConfig(torso="prefix_conv", torso_options=("width=3",))
    with pytest.raises(ConfigError, match="agent.torso_options"):
        DQNConfig(torso="mlp", torso_options=("blocks=1",))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_learns_and_prefix_front_shows_the_run(tmp_path):
    """A tiny Anakin run on PrefixAdder-6 (w sampled per episode, 4 devices) collects its
    greedy designs over a w sweep into designs.jsonl when it ends, and `show_front(RUN_DIR)`
    plots the front and writes it as Verilog. (Whether this budget learns is not asserted: after
    DQN's n-step replay changed, the greedy return at w = 0.2 was -0.11; DQN's learning with
    masks is the contract suite's masked probe.)"""
    from experiments import train as train_lib
    from experiments.prefix import fronts as prefix

    run_dir = tmp_path / "run"
    config = Config(
        env=EnvConfig("PrefixAdder-6"), total_env_steps=3_072, seed=0, run_dir=str(run_dir),
        agent=DQNConfig(learning_rate=2e-3, buffer_size=3_072, batch_size=32, gradient_steps=1, gamma=0.75,
                        learning_starts=256, target_update_period=20, epsilon_decay_steps=1_500, epsilon_end=0.05,
                        **SMALL),
        arch=AnakinConfig(num_envs=16, rollout_length=4, updates_per_call=48),
    )
    result = train_lib.train(config, console=False)
    assert result.env_steps >= config.total_env_steps

    designs, model = read_designs(str(run_dir))  # the run wrote its greedy designs and its front
    assert model == "analytic-0" and len(designs) > 2
    assert (run_dir / "front" / "front.csv").exists()
    summary = prefix.show_front(str(run_dir))
    assert "collected" not in summary and summary["designs"] == len(designs)
    assert (run_dir / "front.png").exists() and (run_dir / "front.json").exists()
    assert summary["verilog"] and all(path.endswith(".v") and os.path.exists(path) for path in summary["verilog"])
    assert "module" in open(summary["verilog"][0]).read()


def test_greedy_designs_of_a_run_last_its_time_limit(tmp_path, monkeypatch):
    """`collect_run_designs` rolls the policy out for the run's own episode length
    (`env.max_episode_steps`), not the environment's default 2 N."""
    from experiments import evaluate
    from experiments import run_dir as run_dir_lib
    from experiments.prefix import run_designs as prefix_run

    def first_legal(params, obs, key, core, start):  # adds a node every step, so each step is a new graph
        return jnp.argmax(obs.action_mask, axis=-1), core

    config = Config(env=EnvConfig("PrefixAdder-8-w0.5", max_episode_steps=3), agent=DQNConfig(**SMALL),
                    arch=AnakinConfig())
    monkeypatch.setattr(run_dir_lib, "load_run_config", lambda run_dir: config)
    monkeypatch.setattr(evaluate, "load_policy", lambda *args, **kwargs: evaluate.Loaded(
        config, evaluate.Policy(first_legal, lambda batch: (None, None)), {}, 0))
    collected = prefix_run.collect_run_designs(str(tmp_path))
    assert collected["designs"] == 2 * (3 + 1)  # two starts, each with its 3 steps' graphs

    # A run with a fanout-aware delay (env.params) is rolled out and costed in its model.
    config = dataclasses.replace(config, env=dataclasses.replace(config.env, params=("fanout_weight=0.5",)))
    prefix_run.collect_run_designs(str(tmp_path))
    designs, model = read_designs(str(tmp_path))
    assert model == "analytic-0.5"
    assert all(d.delay == G.delay(d.nodes, 0.5) for d in designs)
    assert any(d.delay != G.delay(d.nodes) for d in designs)
    config = dataclasses.replace(config, env=dataclasses.replace(config.env, params=("fanout_weight=-1",)))
    with pytest.raises(ConfigError, match="env.params"):
        prefix_run.collect_run_designs(str(tmp_path))


@pytest.mark.parametrize("name,bits", [("dqn-prefix16-anakin", 16), ("dqn-prefix16-sebulba", 16),
                                       ("dqn-prefix32-sebulba", 32), ("dqn-prefix16-front-sebulba", 16),
                                       ("dqn-prefix32-front-sebulba", 32)])
@pytest.mark.costly
def test_presets_build_the_prefix_agent(name, bits):
    """Each preset names its prefix-adder env and builds PrefixRL's agent on its specs."""
    from experiments.prefix.host_env import parse_host_id
    from experiments.presets import all_presets

    config = all_presets()[name]()
    assert config.agent.torso == "prefix_conv" and parse_host_id(config.env.id)["bits"] == bits
    assert parse_host_id(config.env.id)["synthesis"] == name.endswith("sebulba")
    if name.endswith("sebulba"):  # its options are the host form's
        from experiments.prefix.host_env import host_options

        assert host_options(config.env.id, config.env.params).get("front_restarts", 0) == ("front" in name)
    env = PrefixAdderEnv(bits)
    agent = make_agent(config.agent, env.observation_spec(None), env.action_spec(None), num_updates=1,
                       axis_name=None)
    params = jax.eval_shape(agent.init, jax.random.key(0)).params.online
    obs = jax.ShapeDtypeStruct((2, bits, bits, 5), jnp.float32)
    q = jax.eval_shape(lambda p, o: dqn.make_q_network(config.agent, env.observation_spec(None),
                                                       env.action_spec(None)).apply(p, o), params, obs)
    assert q.shape == (2, 2 * bits * bits)


def test_a_config_saved_with_the_prefix_fields_of_dqn_config_still_loads():
    """A run saved while the prefix torso's options were DQNConfig fields (`prefix_blocks`,
    `prefix_channels`) loads with them as `torso_options` and passes the resume check
    against its checkpoint's config; other DQN configs lose the two fields only."""
    from experiments.presets import all_presets
    from experiments.run_dir import check_same_run, config_types
    from podracer import config as config_lib

    for name, options in (("dqn-prefix16-front-sebulba", ["blocks=2", "channels=16"]), ("dqn-cartpole-anakin", [])):
        config = all_presets()[name]()
        saved = config_lib.to_dict(config)
        blocks, channels = (2, 16) if options else (4, 32)
        saved["agent"] = {**{k: v for k, v in saved["agent"].items() if k != "torso_options"},
                          "prefix_blocks": blocks, "prefix_channels": channels}
        assert config_lib.from_dict(saved, config_types()) == config
        check_same_run(config, saved, updates=1)
        assert list(config.agent.torso_options) == options


def test_the_prefix_options_of_the_command_line_set_torso_options():
    """`--agent.prefix-channels 16 --agent.prefix-blocks 2` (the options as they were DQN
    fields) set `channels=16` and `blocks=2` in `agent.torso_options`, merged with the
    entries the config or an explicit `--agent.torso-options` holds."""
    from experiments.overrides import OverrideError, apply_overrides
    from experiments.presets import all_presets

    base = all_presets()["dqn-prefix16-anakin"]()
    assert base.agent.torso_options == ("blocks=4", "channels=32")
    config = apply_overrides(base, ["--agent.prefix-channels", "16", "--agent.prefix-blocks", "2"])
    assert config.agent.torso_options == ("channels=16", "blocks=2")
    config = apply_overrides(base, ["--agent.prefix-blocks", "3", "--agent.torso-options", "channels=8"])
    assert config.agent.torso_options == ("channels=8", "blocks=3")
    with pytest.raises(ConfigError, match="agent.torso_options: channels must be > 0"):
        apply_overrides(base, ["--agent.prefix-channels", "0"])
    with pytest.raises(OverrideError, match="takes one value"):
        apply_overrides(base, ["--agent.prefix-channels", "1", "2"])
