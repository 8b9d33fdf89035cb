"""The machinery of `tests/integration/test_contract.py`: trajectories from a probe, one update on 1 vs 4
devices, Anakin's program against Sebulba's learner step, batch shapes a check rejects."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from anakin import runner as anakin_runner
from anakin.config import AnakinConfig
from anakin.program import iteration_keys, make_train_call
from anakin.rollout import reset_envs, rollout
from podracer import parallel
from podracer.agents import Algorithm, make_agent
from podracer.config import Config, ConfigError, EnvConfig
from podracer.envs import make_jax_env
from podracer.types import AgentState, BatchShape, MaskedObs
from sebulba import SebulbaConfig
from sebulba import runner as sebulba_runner
from sebulba.learner import AXIS, device_keys, make_update_step, state_specs, trajectory_sharding
from tests.support.helpers import tree_allclose

CANDIDATE_BATCHES = [(1, 1), (3, 1), (1, 3), (5, 7), (8, 4), (16, 8), (16, 16), (100_000, 1)]


def probe_batch() -> tuple[int, int]:
    """`(rollout_length, envs_per_device)` every built-in probe config accepts."""
    return 8, 4


def rejected_batch(algorithm: Algorithm,
                   configs: list[Any]) -> tuple[Any, tuple[int, int] | None, tuple[int, int]]:
    """`(agent config, a batch its check rejects, one it accepts)`, the first config that has
    both; the rejected batch is None when every config's check accepts every candidate (an
    algorithm without batch arithmetic, e.g. one full-batch gradient step per update)."""
    accepts_all = True
    for config in configs:
        verdicts = {}
        for batch in CANDIDATE_BATCHES:
            try:
                algorithm.check_batch(config, BatchShape(*batch))
                verdicts[batch] = True
            except ConfigError:
                verdicts[batch] = False
        bad = [b for b, ok in verdicts.items() if not ok]
        good = [b for b, ok in verdicts.items() if ok]
        if bad and good:
            return config, bad[0], good[0]
        accepts_all = accepts_all and not bad
    if accepts_all:
        return configs[0], None, CANDIDATE_BATCHES[0]
    raise AssertionError(f"{algorithm.name}: check_batch accepts (or rejects) every batch of {CANDIDATE_BATCHES} "
                         "for every config tried")


def max_change(a: Any, b: Any) -> float:
    a, b = jax.device_get((a, b))
    return max(float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max())
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def probe_trajectory(env_id: str, agent: Any, params: Any, T: int, B: int, seed: int = 1):
    """`[T, B]` steps of the probe with the agent's `act`, jitted."""
    env = make_jax_env(env_id)

    @jax.jit
    def run(params, key):
        reset_key, key = jax.random.split(key)
        envs = reset_envs(env, None, reset_key, B, agent)
        return rollout(env, None, agent, params, envs, key, T)[1]

    return run(params, jax.random.key(seed))


def place_learner_state(state: AgentState, mesh: jax.sharding.Mesh) -> AgentState:
    """`state` (one device's) as Sebulba's learner holds it: replicated, `local` `[D, ...]` sharded."""
    num_devices = mesh.devices.size
    state = state.replace(local=jax.tree.map(lambda x: jnp.broadcast_to(x, (num_devices,) + x.shape), state.local))
    return jax.tree.map(lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec)), state, state_specs(state))


def replicated(state: AgentState) -> AgentState:
    return state.replace(local=None)


def one_vs_four_devices(algorithm: Algorithm, env_id: str) -> None:
    T, B = 8, 8
    env = make_jax_env(env_id)
    obs_spec, action_spec = env.observation_spec(None), env.action_spec(None)
    config = algorithm.exact_config(algorithm.default_probe_config(), BatchShape(T, B))
    one = make_agent(config, obs_spec, action_spec, num_updates=10, axis_name=None)
    four = make_agent(config, obs_spec, action_spec, num_updates=10, axis_name=AXIS)
    state = jax.jit(one.init)(jax.random.key(0))
    traj = probe_trajectory(env_id, one, state.params, T, B)
    key = jax.random.key(7)
    expected, metrics_1 = jax.jit(one.update)(state, traj, key)

    mesh = parallel.make_mesh(jax.devices()[:4], AXIS)
    step = make_update_step(four, mesh)  # the learner's step: the metrics rule is checked inside
    got, metrics_4 = step(place_learner_state(state, mesh), (jax.device_put(traj, trajectory_sharding(mesh)),),
                          device_keys(key, mesh))
    assert max_change(expected.params, state.params) > 1e-5, "the update did not move the parameters"
    tree_allclose(replicated(got), replicated(expected))
    assert metrics_4.keys() == metrics_1.keys()
    # What a metrics row averages over gradient steps (`Algorithm.step_metrics`) is reported.
    missing = set(algorithm.step_metrics) - set(metrics_1)
    assert not missing, f"step_metrics {sorted(missing)} are not among the agent's metrics"
    assert not algorithm.step_metrics or "gradient_steps" in metrics_1, "step_metrics need a gradient_steps metric"
    if "loss" in metrics_1:
        np.testing.assert_allclose(metrics_4["loss"], metrics_1["loss"], rtol=1e-5, atol=1e-6)


def anakin_vs_sebulba(algorithm: Algorithm, env_id: str, max_updates: int = 40, agent_config: Any = None) -> None:
    T, envs_per_device = 8, 2
    agent_config = algorithm.default_probe_config() if agent_config is None else agent_config
    config = Config(env=EnvConfig(env_id), agent=agent_config, total_env_steps=10**6,
                    arch=AnakinConfig(num_envs=2 * envs_per_device, rollout_length=T, devices=(0, 1),
                                      updates_per_call=1))
    a = anakin_runner.setup(config)
    state = anakin_runner.initial_state(config, a)
    s = sebulba_runner.setup(dataclasses.replace(config, arch=SebulbaConfig(
        num_envs=2 * envs_per_device, rollout_length=T, actor_devices=(2,), learner_devices=(0, 1))))

    seed0 = jax.device_get(jax.tree.map(lambda x: x[0], state.agent))  # local: [D, ...]
    learner = jax.tree.map(lambda x, spec: jax.device_put(x, NamedSharding(s.mesh, spec)), seed0, state_specs(seed0))
    # Device d's keys and environments, gathered on one device (the CPU's numbers do not
    # depend on which device computes them).
    one = jax.devices()[0]
    keys = [jax.device_put(state.key[0, d], one) for d in range(2)]
    envs = [jax.device_put(jax.tree.map(lambda x: x[0, d * envs_per_device:(d + 1) * envs_per_device], state.envs),
                           one) for d in range(2)]
    roll = jax.jit(lambda params, envs, key: rollout(a.env, a.env_params, a.agent, params, envs, key, T)[:2])
    update_step = make_update_step(s.agent, s.mesh)
    updates = 0
    while updates < max_updates:
        split = [iteration_keys(key) for key in keys]
        params = parallel.local_copy(learner.params)
        outputs = [roll(params, envs[d], split[d].rollout) for d in range(2)]
        envs = [carry for carry, _ in outputs]
        traj = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *[t for _, t in outputs])
        update_keys = jax.device_put(jnp.stack([k.update for k in split]), NamedSharding(s.mesh, P(AXIS)))
        learner, _ = update_step(learner, (jax.device_put(traj, trajectory_sharding(s.mesh)),), update_keys)
        keys = [k.next for k in split]
        updates += 1
        if max_change(learner.params, seed0.params) > 1e-5:
            break
    assert max_change(learner.params, seed0.params) > 1e-5, f"parameters never moved in {max_updates} updates"
    anakin_state, _ = make_train_call(a.env, a.env_params, a.agent, a.mesh, T)(state, jnp.int32(updates))
    tree_allclose(jax.tree.map(lambda x: x[0], anakin_state.agent.params), learner.params)


def learned_policy_ok(result: Any, config: Config, space: str) -> None:
    """The greedy (else sampled) action on each probe context is the best one, and the last
    metrics row's return is near the optimum."""
    params = jax.tree.map(lambda x: x[0], result.state.agent.params)
    obs = jnp.array([[-1.0], [1.0]])
    final = result.metrics[-1]["episode_return"]
    if space == "masked":
        obs = MaskedObs(obs, jnp.array([[False, True, True, False], [False, False, True, True]]))
    if space == "box":  # ProbeContinuousAction observes 2 + s for s = -1, +1
        obs = obs + 2.0
    agent = result.agent
    core, start = agent.initial_acting_state(2)
    if agent.greedy_act is not None:
        action = np.asarray(jax.jit(agent.greedy_step)(params, obs, core, start)[0])
    else:
        action = np.asarray(jax.jit(agent.step)(params, obs, jax.random.key(0), core, start)[0])
    rows = [row["episode_return"] for row in result.metrics]
    if space == "box":
        # A uniform random action scores about -0.58; the mean action must be near s / 2.
        np.testing.assert_allclose(action.reshape(2), [-0.5, 0.5], atol=0.15, err_msg=str(rows))
        assert final >= -0.15, rows
    else:
        assert action.tolist() == ([1, 3] if space == "masked" else [0, 1]), (action, rows)
        assert final >= 0.8, rows
