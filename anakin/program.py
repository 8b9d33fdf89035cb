"""The compiled Anakin program: rollout + update loops, over seeds, sharded over devices.

Per device and per seed, one host call runs `num_updates` iterations of
`rollout (lax.scan over T steps of an env batch, envs.base.step_batch) -> agent.update`
inside a `lax.fori_loop`; the agent averages gradients and its metrics over the device axis with
`lax.pmean` (the metrics rule, checked by `checked_update`; the runner never averages them).
Each iteration's keys come from `iteration_keys`, the public seam parity tests go through.
Seeds are an outer `vmap` (`over_seeds`: none for a single seed); devices are a
`jax.shard_map` over a 1-D mesh. A population (`podracer.population`: swept hyperparameters
times seeds) is the same axis: each member carries its hyperparameters in the state
(`RunnerState.hypers`), and its agent is built inside the per-member function from them
(`member_agent`), so that they are traced values of one program. The trip count is a
traced argument, so a short last call reuses the same executable.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from anakin.rollout import EnvCarry, reset_envs, rollout
from podracer import parallel
from podracer.agents.registry import checked_update
from podracer.envs import JaxEnv
from podracer.runner.device_state import add_device_axis, agent_state_specs, broadcast_device_axis, strip_device_axis
from podracer.runner.episodes import EpisodeStats
from podracer.runner.metrics import GRADIENT_STEPS
from podracer.types import Agent, AgentState, PRNGKey

AXIS = "device"


class RunnerState(NamedTuple):
    """Everything a run needs to continue exactly: a pytree with a leading seed axis.

    agent: `[S, ...]`, replicated over devices, except `agent.local` (per-device state such
           as a replay buffer): `[S, D, ...]`, sharded over devices, one copy each.
    envs:  `[S, B, ...]`, environments sharded over devices (B = all envs of a seed), with a
           recurrent agent's core state and start flags (`EnvCarry`), so resume is exact.
    key:   `[S, D]`, one key per seed and device, sharded over devices.
    hypers: a population's swept hyperparameters, field -> `[S]`, replicated (empty without
           a sweep); PBT changes them between host calls.
    """

    agent: AgentState
    envs: EnvCarry
    key: PRNGKey
    hypers: dict[str, jax.Array] = {}


class SeedsState(NamedTuple):
    """A `RunnerState` without hyperparameters: how a run without a sweep is checkpointed,
    so that its checkpoints keep one layout whatever a population adds (orbax refuses a
    target with a subtree, even an empty one, that the checkpoint lacks)."""

    agent: AgentState
    envs: EnvCarry
    key: PRNGKey


def checkpointed(state: RunnerState) -> RunnerState | SeedsState:
    """What is saved of `state` (and the target it is restored into)."""
    return state if state.hypers else SeedsState(state.agent, state.envs, state.key)


def from_checkpointed(state: RunnerState | SeedsState) -> RunnerState:
    """Undo `checkpointed`."""
    return state if isinstance(state, RunnerState) else RunnerState(state.agent, state.envs, state.key)


class IterationKeys(NamedTuple):
    """The keys of one iteration on one device (and seed): `next` for the following one."""

    next: PRNGKey
    rollout: PRNGKey
    update: PRNGKey


def iteration_keys(key: PRNGKey) -> IterationKeys:
    """How an iteration splits its device's key: the rollout acts with `rollout`, the
    update gets `update`, and `next` carries on. Public so that a test can feed the same
    trajectory and key to another runner (Sebulba's learner) and compare."""
    return IterationKeys(*jax.random.split(key, 3))


class CallMetrics(NamedTuple):
    """What one host call reports, each `[S]`: agent metrics summed over its updates and
    episode statistics summed over every device. For an agent that reports
    `gradient_steps`, `agent_by_step` holds each of its step metrics times its update's
    `gradient_steps`, summed (`podracer.runner.agent_means`); empty otherwise."""

    agent: dict[str, jax.Array]
    episodes: EpisodeStats
    agent_by_step: dict[str, jax.Array]


def state_specs(state: Any) -> RunnerState:
    """Partition specs of a `RunnerState` (or a tree of the same structure)."""
    return RunnerState(
        agent=agent_state_specs(state.agent, AXIS, seed_axes=1),
        envs=jax.tree.map(lambda _: P(None, AXIS), state.envs),
        key=P(None, AXIS),
        hypers=jax.tree.map(lambda _: P(), state.hypers),
    )


MemberAgent = Callable[[dict[str, jax.Array]], Agent]  # a member's hyperparameters -> its agent


def init_state(
    env: JaxEnv, env_params: Any, agent: Agent, mesh: Mesh, key: PRNGKey, num_seeds: int, num_envs: int,
    hypers: dict[str, np.ndarray] | None = None, member_agent: MemberAgent | None = None,
) -> RunnerState:
    """Initial state, placed on the mesh. Agents are initialised one member at a time and
    stacked (on CPU, jax 0.10 can deadlock in a vmapped orthogonal init: LAPACK QR inside
    a parallel batch map). With a population, `hypers` (field -> `[M]`, `M` a multiple of
    `num_seeds`) are the members' hyperparameters and `member_agent` builds a member's
    agent from them; member `m` has the keys of seed `m % num_seeds`."""
    num_devices = mesh.devices.size
    hypers = hypers or {}
    num_members = len(next(iter(hypers.values()))) if hypers else num_seeds
    seed_keys = jax.random.split(key, num_seeds)
    init = jax.jit(agent.init) if not hypers else jax.jit(lambda k, h: member_agent(h).init(k))
    agents, envs, keys = [], [], []
    for member in range(num_members):
        agent_key, env_key, run_key = jax.random.split(seed_keys[member % num_seeds], 3)
        member_hypers = {name: values[member] for name, values in hypers.items()}
        agents.append(init(agent_key, member_hypers) if hypers else init(agent_key))
        envs.append(jax.jit(reset_envs, static_argnums=(0, 3, 4))(env, env_params, env_key, num_envs, agent))
        keys.append(jax.random.split(run_key, num_devices))
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    agent_state = jax.tree.map(stack, *agents)
    # Every device starts from the same (empty) per-device state: a broadcast host view,
    # so `shard` copies one `[S, ...]` slice to each device rather than `[S, D, ...]`.
    agent_state = agent_state.replace(local=broadcast_device_axis(
        jax.tree.map(np.asarray, agent_state.local), num_devices, seed_axes=1))
    state = RunnerState(agent_state, jax.tree.map(stack, *envs), jnp.stack(keys),
                        {name: jnp.asarray(values) for name, values in hypers.items()})
    return jax.tree.map(lambda x, s: parallel.shard(x, mesh, s), state, state_specs(state))


def over_seeds(one_seed: Callable[..., Any]) -> Callable[..., Any]:
    """`one_seed(*seeded, shared)` over the leading seed axis `[S, ...]` of its first
    arguments (not the last): `jax.vmap`, except for a single seed, which is indexed and
    restacked instead. The same program; without a batching pass over every equation of
    the traced iteration, the usual one-seed run traces and lowers faster."""

    def run(*args):
        *seeded, shared = args
        if jax.tree.leaves(seeded)[0].shape[0] != 1:
            return jax.vmap(one_seed, in_axes=(0,) * len(seeded) + (None,))(*seeded, shared)
        out = one_seed(*jax.tree.map(lambda x: x[0], seeded), shared)
        return jax.tree.map(lambda x: x[None], out)

    return run


def make_train_call(
    env: JaxEnv, env_params: Any, agent: Agent, mesh: Mesh, rollout_length: int, step_metrics: tuple[str, ...] = (),
    check_typing: bool = True, member_agent: MemberAgent | None = None,
) -> Callable[[RunnerState, jax.Array], tuple[RunnerState, CallMetrics]]:
    """`(state, num_updates) -> (state, metrics)`, jitted, state donated. `step_metrics`
    (`Algorithm.step_metrics`) are also summed weighted by each update's gradient steps.
    `check_typing` traces the update alone under device-variance typing first
    (`check_update_typing`; the runner skips it for built-in algorithms, which the contract
    suite checks, since the extra trace adds to every compile). `member_agent` builds a
    population member's agent from its hyperparameters (`RunnerState.hypers`), inside the
    traced per-member function; without hyperparameters, `agent` serves every seed."""

    update = checked_update(agent.update, AXIS)

    @jax.jit
    def iteration(agent_state: AgentState, envs: EnvCarry, key: PRNGKey, hypers: dict[str, jax.Array]):
        # Jitted so that its trace is cached: `eval_shape` below traces it once, and the
        # loop body's call reuses that trace instead of tracing rollout and update again.
        member = member_agent(hypers) if hypers else agent
        key, rollout_key, update_key = iteration_keys(key)
        envs, traj, episode_stats = rollout(
            env, env_params, member, agent_state.params, envs, rollout_key, rollout_length
        )
        agent_state, metrics = (checked_update(member.update, AXIS) if hypers else update)(
            agent_state, traj, update_key)
        return agent_state, envs, key, episode_stats, metrics

    def one_seed(agent_state: AgentState, envs: EnvCarry, key: PRNGKey, hypers: dict[str, jax.Array],
                 num_updates: jax.Array):
        metric_shapes = jax.eval_shape(iteration, agent_state, envs, key, hypers)[-1]
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
        weighted = [name for name in step_metrics if name in zeros] if GRADIENT_STEPS in zeros else []
        metric_sums = (zeros, {name: zeros[name] for name in weighted})
        stats = parallel.to_varying(EpisodeStats.zeros(), AXIS)

        def body(_, carry):
            agent_state, envs, key, stats, (sums, by_step) = carry
            agent_state, envs, key, episode_stats, metrics = iteration(agent_state, envs, key, hypers)
            sums = jax.tree.map(jnp.add, sums, metrics)
            if weighted:
                steps = metrics[GRADIENT_STEPS]
                by_step = {name: total + metrics[name] * steps.astype(total.dtype) for name, total in by_step.items()}
            return agent_state, envs, key, stats + episode_stats, (sums, by_step)

        agent_state, envs, key, stats, (sums, by_step) = jax.lax.fori_loop(
            0, num_updates, body, (agent_state, envs, key, stats, metric_sums)
        )
        stats = jax.lax.psum(stats, AXIS)
        return agent_state, envs, key, CallMetrics(sums, stats, by_step)

    def per_device(state: RunnerState, num_updates: jax.Array):
        # Inside, per-device state is seen without its device axis: `[S, 1, ...] -> [S, ...]`.
        local = strip_device_axis(state.agent.local, seed_axes=1)
        agent_state, envs, key, metrics = over_seeds(one_seed)(
            state.agent.replace(local=local), state.envs, state.key[:, 0], state.hypers, num_updates
        )
        agent_state = agent_state.replace(local=add_device_axis(agent_state.local, seed_axes=1))
        return RunnerState(agent_state, envs, key[:, None], state.hypers), metrics

    def call(state: RunnerState, num_updates: jax.Array):
        if check_typing:
            check_update_typing(env, env_params, agent, mesh, rollout_length, update, state)
        specs = state_specs(state)
        metric_specs = P()
        sharded = jax.shard_map(
            per_device, mesh=mesh, in_specs=(specs, P()), out_specs=(specs, metric_specs), check_vma=False
        )
        return sharded(state, num_updates)

    return jax.jit(call, donate_argnums=0)


def check_update_typing(
    env: JaxEnv, env_params: Any, agent: Agent, mesh: Mesh, rollout_length: int, update: Any, state: RunnerState
) -> None:
    """Trace (nothing runs) one seed's `update` alone under `shard_map`'s device-variance
    typing (`check_vma=True`), on a trajectory shaped as the rollout's, so that the metrics
    rule (`checked_update`) is enforced under Anakin as under Sebulba's learner.

    The training program itself is sharded with `check_vma=False`: environment code is
    third-party code written without `shard_map` in mind (a `lax.cond` with a constant in one
    branch, PRNG keys chosen across branches, loops started from constants), which that
    typing rejects. Its gradient average is explicit (`parallel.value_and_mean_grad`), so it
    is the same under either setting."""
    num_devices = mesh.devices.size
    seed = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state)  # one seed: [D, ...], [B, ...]
    local = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), seed.agent.local)
    envs = jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0] // num_devices, *x.shape[1:]), x.dtype), seed.envs)
    key = jax.ShapeDtypeStruct(seed.key.shape[1:], seed.key.dtype)
    traj = jax.eval_shape(lambda a, e, k: rollout(env, env_params, agent, a.params, e, k, rollout_length)[1],
                          seed.agent.replace(local=local), envs, key)
    traj = jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0], x.shape[1] * num_devices, *x.shape[2:]), x.dtype),
                        traj)

    def per_device(agent_state: AgentState, traj: Any, keys: PRNGKey) -> Any:
        local = strip_device_axis(agent_state.local, seed_axes=0)
        return update(agent_state.replace(local=local), traj, keys[0])[1]

    specs = (agent_state_specs(seed.agent, AXIS, seed_axes=0), P(None, AXIS), P(AXIS))
    jax.eval_shape(jax.shard_map(per_device, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=True),
                   seed.agent, traj, seed.key)


def make_rollout_call(
    env: JaxEnv, env_params: Any, agent: Agent, mesh: Mesh, rollout_length: int
) -> Callable[[RunnerState, jax.Array], tuple[RunnerState, EpisodeStats]]:
    """Acting only, no learning: the same env batch and network as `make_train_call`.
    Its throughput is the physical limit a training program can approach."""

    def one_seed(agent_state: AgentState, envs: EnvCarry, key: PRNGKey, num_rollouts: jax.Array):
        def body(_, carry):
            envs, key, stats = carry
            key, rollout_key = jax.random.split(key)
            envs, _, episode_stats = rollout(
                env, env_params, agent, agent_state.params, envs, rollout_key, rollout_length
            )
            return envs, key, stats + episode_stats

        stats = parallel.to_varying(EpisodeStats.zeros(), AXIS)
        envs, key, stats = jax.lax.fori_loop(0, num_rollouts, body, (envs, key, stats))
        return envs, key, jax.lax.psum(stats, AXIS)

    def per_device(state: RunnerState, num_rollouts: jax.Array):
        envs, key, stats = over_seeds(one_seed)(state.agent, state.envs, state.key[:, 0], num_rollouts)
        return RunnerState(state.agent, envs, key[:, None], state.hypers), stats

    def call(state: RunnerState, num_rollouts: jax.Array):
        specs = state_specs(state)
        sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(specs, P()), out_specs=(specs, P()), check_vma=False)
        return sharded(state, num_rollouts)

    return jax.jit(call, donate_argnums=0)
