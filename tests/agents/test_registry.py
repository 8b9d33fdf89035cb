"""The algorithm registry and the metrics rule: declaring, registering, finding algorithms,
and runners refusing an `update` whose metrics still vary across devices."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import parallel
from podracer.agents import Algorithm, PPOConfig, algorithm_for, algorithms, make_ppo, register_algorithm, registry
from podracer.config import Config, ConfigError, EnvConfig, from_dict, to_dict
from podracer.types import BatchShape, BoxSpec, DiscreteSpec, ObsSpec


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    num_minibatches: int = 1

    def check_batch(self, batch: BatchShape) -> None:
        pass


def toy(name="toy", **fields) -> Algorithm:
    return Algorithm(**{"name": name, "config": ToyConfig, "make": make_ppo, "check_batch": ToyConfig.check_batch,
                        **fields})


def test_the_builtins_declare_themselves():
    assert list(algorithms()) == ["ppo", "impala", "dqn", "pqn", "muzero", "sac", "td3"]
    for algorithm in algorithms().values():
        assert algorithm_for(algorithm.config()) is algorithm
    assert [name for name, algorithm in algorithms().items() if algorithm.masks] == ["ppo", "impala", "dqn"]
    assert [name for name, algorithm in algorithms().items() if BoxSpec in algorithm.action_spaces] == \
        ["ppo", "sac", "td3"]
    assert [name for name, algorithm in algorithms().items() if DiscreteSpec not in algorithm.action_spaces] == \
        ["sac", "td3"]
    with pytest.raises(ConfigError, match="no algorithm is registered for ToyConfig"):
        algorithm_for(ToyConfig())


def test_the_batch_check_is_mandatory_and_the_record_validated():
    with pytest.raises(TypeError):
        Algorithm("toy", ToyConfig, make_ppo)  # no check_batch
    with pytest.raises(TypeError, match="check_batch must be callable"):
        toy(check_batch=None)
    with pytest.raises(ValueError, match="action_spaces"):
        toy(action_spaces=(ObsSpec,))
    with pytest.raises(TypeError, match="config must be a dataclass"):
        toy(config=int)
    with pytest.raises(TypeError, match="step_metrics must be a tuple of metric names"):
        toy(step_metrics="loss")


def test_register_one_call_and_everything_sees_it(capsys):
    from experiments.cli import main
    from experiments.run_dir import config_types

    with pytest.raises(ValueError, match="built-in"):
        register_algorithm(toy(name="ppo"))
    register_algorithm(toy())
    try:
        assert algorithm_for(ToyConfig()).name == "toy" and "toy" in algorithms()
        with pytest.raises(ValueError, match="already registered"):
            register_algorithm(toy())
        register_algorithm(toy(masks=True, action_spaces=(DiscreteSpec, BoxSpec)), overwrite=True)
        assert algorithms()["toy"].masks
        assert ToyConfig in config_types()  # a saved config.json naming it loads back
        from anakin import AnakinConfig

        config = Config(agent=ToyConfig(3), arch=AnakinConfig(), env=EnvConfig("Catch"))
        assert from_dict(to_dict(config), config_types()).agent == ToyConfig(3)
        main(["list"])
        out = capsys.readouterr().out
        assert re.search(r"^  toy +ToyConfig: DiscreteSpec, BoxSpec, action masks$", out, re.MULTILINE), out
    finally:
        registry.unregister_algorithm("toy")
    assert "toy" not in algorithms()
    # A run of it read back in a process that has not registered it says what to do.
    # (On the command line: $PODRACER_IMPORT, which the message names.)
    with pytest.raises(ConfigError, match=r"unknown config type 'ToyConfig' .*register_algorithm.*\$PODRACER_IMPORT"):
        from_dict(to_dict(config), config_types())


def _metrics_update(averaged: bool, axis: str):
    def update(state, traj, key):
        loss = jnp.mean(traj)
        return state, {"loss": parallel.pmean(loss, axis) if averaged else loss}

    return update


@pytest.mark.parametrize("averaged", [True, False])
def test_the_metrics_rule_is_checked_under_shard_map(averaged):
    """Metrics averaged by the agent pass; a metric left per-device is an error naming it."""
    mesh = parallel.make_mesh(jax.devices()[:4], "d")
    update = registry.checked_update(_metrics_update(averaged, "d"), "d")
    run = jax.jit(jax.shard_map(update, mesh=mesh, in_specs=(P(), P("d"), P()), out_specs=(P(), P()),
                                check_vma=True))
    args = (jnp.zeros(()), jnp.arange(8.0), jax.random.key(0))
    if averaged:
        np.testing.assert_allclose(run(*args)[1]["loss"], 3.5)
    else:
        with pytest.raises(registry.MetricsRuleError, match=r"differ across devices \(loss\)"):
            run(*args)
    with pytest.raises(registry.MetricsRuleError, match="non-scalar metrics loss"):
        registry.check_metrics({"loss": jnp.zeros(3)}, None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", ["anakin", "sebulba"])
def test_both_runners_refuse_metrics_the_agent_did_not_average(runner, monkeypatch):
    """An agent that forgets to average a metric fails when its program is built, in both
    runners, with the metrics rule's message (and nothing averages it for the agent)."""
    import anakin
    import sebulba
    from anakin import AnakinConfig
    from sebulba import SebulbaConfig

    def forgetful(make):
        def make_agent(*args, **kwargs):
            agent = make(*args, **kwargs)

            def update(state, traj, key):
                state, metrics = agent.update(state, traj, key)
                return state, {**metrics, "local_reward": jnp.mean(traj.reward)}

            return agent._replace(update=update)

        return make_agent

    agent = PPOConfig(num_minibatches=1, num_epochs=1, hidden_sizes=(8,))
    if runner == "anakin":
        # Anakin checks the metrics rule of a user algorithm (in a trace of its update alone,
        # under device-variance typing: the program itself runs without it).
        @dataclasses.dataclass(frozen=True)
        class ForgetfulConfig(PPOConfig):
            pass

        ppo = algorithm_for(agent)
        register_algorithm(dataclasses.replace(ppo, name="forgetful-ppo", config=ForgetfulConfig,
                                               make=forgetful(ppo.make)))
        config = Config(agent=ForgetfulConfig(num_minibatches=1, num_epochs=1, hidden_sizes=(8,)),
                        env=EnvConfig("ProbeActionReward"), total_env_steps=64,
                        arch=AnakinConfig(num_envs=4, rollout_length=8, devices=(0, 1), updates_per_call=1))
        try:
            with pytest.raises(registry.MetricsRuleError, match="local_reward"):
                anakin.train(config)
        finally:
            registry.unregister_algorithm("forgetful-ppo")
    else:
        monkeypatch.setattr(sebulba.runner, "make_checked_agent", forgetful(sebulba.runner.make_checked_agent))
        config = Config(agent=agent, env=EnvConfig("ProbeActionReward"), total_env_steps=64,
                        arch=SebulbaConfig(num_envs=4, rollout_length=8, actor_devices=(2,), learner_devices=(0, 1)))
        with pytest.raises(registry.MetricsRuleError, match="local_reward"):
            sebulba.train(config)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", ["anakin", "sebulba"])
def test_a_user_agent_whose_actions_break_the_contract_fails_at_setup(runner):
    """A user algorithm whose `act` (or `greedy_act`) returns float actions for a discrete
    space is refused at setup, naming the function and the dtype it must return; it used to
    fail inside the runner with JAX's error about a `lax.scan` carry (Anakin) or a gather's
    indices (Sebulba). Built-ins are left to the contract suite."""
    import anakin
    import sebulba
    from anakin import AnakinConfig
    from sebulba import SebulbaConfig

    def make_float_actions(which):
        def make(config, obs_spec, action_spec, *, num_updates, axis_name):
            agent = make_ppo(PPOConfig(num_minibatches=1, hidden_sizes=(8,)), obs_spec, action_spec,
                             num_updates=num_updates, axis_name=axis_name)
            if which == "act":
                return agent._replace(act=lambda p, o, k: (agent.act(p, o, k)[0].astype(jnp.float32), {}))
            return agent._replace(greedy_act=lambda p, o: agent.greedy_act(p, o).astype(jnp.float32))

        return make

    arch = AnakinConfig(num_envs=4, rollout_length=8, devices=(0,), updates_per_call=1) if runner == "anakin" else \
        SebulbaConfig(num_envs=4, rollout_length=8, actor_devices=(0,), learner_devices=(0,))
    config = Config(agent=ToyConfig(), env=EnvConfig("ProbeActionReward"), total_env_steps=64, arch=arch)
    module = anakin.runner if runner == "anakin" else sebulba.runner
    for which in ("act", "greedy_act"):
        register_algorithm(toy(make=make_float_actions(which)))
        try:
            with pytest.raises(registry.ActContractError,
                               match=rf"^agent 'toy': {which} returns actions float32\[4\] for a batch of 4 "
                                     r"observations; with discrete actions \(2\) they must be int32\[4\]"):
                module.setup(config)
        finally:
            registry.unregister_algorithm("toy")
    register_algorithm(toy(make=lambda config, *args, **kwargs: make_ppo(PPOConfig(num_minibatches=1), *args,
                                                                         **kwargs)))
    try:
        module.setup(config)  # the same agent with its own actions passes
    finally:
        registry.unregister_algorithm("toy")


def _tiny_ppo(**fields):
    return make_ppo(PPOConfig(num_minibatches=1, hidden_sizes=(4,), **fields), ObsSpec((3,), jnp.float32),
                    DiscreteSpec(2), num_updates=1, axis_name=None)


def test_the_act_contract_passes_recurrent_agents_and_agents_without_greedy_act():
    """`check_act_outputs` acts as the runners do: a recurrent agent with its initial core and
    start flags, an agent without `greedy_act` by `act` only."""
    obs_spec, action_spec = ObsSpec((3,), jnp.float32), DiscreteSpec(2)
    recurrent = _tiny_ppo(core="lstm", core_size=4)
    assert recurrent.recurrent
    registry.check_act_outputs(recurrent, obs_spec, action_spec, 3, "lstm")
    registry.check_act_outputs(_tiny_ppo()._replace(greedy_act=None), obs_spec, action_spec, 3, "no-greedy")


def test_the_act_contract_names_an_action_that_is_not_an_array():
    agent = _tiny_ppo()
    bad = agent._replace(act=lambda p, o, k: ((agent.act(p, o, k)[0],), {}))
    with pytest.raises(registry.ActContractError, match=r"^agent 'tuple': act returns actions \(ShapeDtypeStruct"):
        registry.check_act_outputs(bad, ObsSpec((3,), jnp.float32), DiscreteSpec(2), 3, "tuple")


def test_pairing_refuses_masks_only_to_algorithms_that_ignore_them():
    from podracer.types import MaskedObs

    masked = MaskedObs(ObsSpec((3,), jnp.float32), ObsSpec((2,), jnp.bool_))
    registry.check_pairing(algorithms()["ppo"], masked, DiscreteSpec(2), "Masked-v0")  # PPO respects masks
    with pytest.raises(ConfigError) as error:
        registry.check_pairing(algorithms()["pqn"], masked, DiscreteSpec(2), "Masked-v0")
    assert str(error.value) == ("agent: pqn does not respect legal-action masks, and env.id 'Masked-v0' has masked "
                                "observations (MaskedObs)")


def test_make_agent_builds_the_registered_algorithms_agent_for_the_action_space():
    agent = registry.make_agent(PPOConfig(num_minibatches=1, hidden_sizes=(4,)), ObsSpec((3,), jnp.float32),
                                DiscreteSpec(5), num_updates=1, axis_name=None)
    params = agent.init(jax.random.key(0)).params
    action = agent.greedy_act(params, jnp.zeros((2, 3)))
    logits_width = {leaf.shape[-1] for leaf in jax.tree.leaves(params) if leaf.ndim == 2}
    assert action.shape == (2,) and 5 in logits_width


def test_the_metrics_rule_names_every_offender_and_reads_several_axis_names():
    with pytest.raises(registry.MetricsRuleError) as error:
        registry.check_metrics({"a": jnp.zeros(2), "b": jnp.zeros((1, 1)), "c": jnp.zeros(())}, None)
    assert str(error.value) == "agent.update returned non-scalar metrics a, b; metrics are scalars " \
                               "(podracer.types.UpdateFn)"
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:4]).reshape(2, 2), ("x", "y"))

    def update(state, batch, key):
        return state, {"loss": jnp.mean(batch)}  # averaged over neither axis

    run = jax.jit(jax.shard_map(registry.checked_update(update, ("x", "y")), mesh=mesh,
                                in_specs=(P(), P(("x", "y")), P()), out_specs=(P(), P()), check_vma=True))
    with pytest.raises(registry.MetricsRuleError, match=r"differ across devices \(loss\)"):
        run(jnp.zeros(()), jnp.arange(8.0), jax.random.key(0))


def test_a_user_algorithm_replaces_only_its_own_registration():
    """Re-registering needs `overwrite`; it replaces the record of the same name or config
    and leaves other user algorithms alone."""

    @dataclasses.dataclass(frozen=True)
    class OtherConfig:
        num_minibatches: int = 1

    first, other = toy("first"), Algorithm("other", OtherConfig, make_ppo, ToyConfig.check_batch)
    register_algorithm(first)
    register_algorithm(other)
    try:
        with pytest.raises(ValueError, match="'first' is already registered"):
            register_algorithm(toy("first"))
        register_algorithm(toy("renamed"), overwrite=True)  # ToyConfig again: replaces 'first'
        assert "renamed" in algorithms() and "first" not in algorithms() and "other" in algorithms()
    finally:
        for name in ("first", "renamed", "other"):
            registry.unregister_algorithm(name)


def test_an_algorithm_needs_a_string_name():
    for name in ("", 7):
        with pytest.raises(ValueError, match="an algorithm needs a name"):
            toy(name)
