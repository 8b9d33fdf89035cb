"""Pieces that several agents share: network construction, acting, minibatching."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from podracer import networks
from podracer.agents.policies import Categorical, Policy
from podracer.config import ConfigError
from podracer.networks import structured as networks_structured
from podracer.networks.registry import BUILTIN_TORSOS
from podracer.ops import VTraceOutput, masked_logits, vtrace_td_error_and_advantage
from podracer.types import (
    ActionSpec,
    Array,
    BoxSpec,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    network_obs_spec,
    split_mask,
    zeros_like_spec,
)

TORSOS = BUILTIN_TORSOS
ACTIVATIONS = ("tanh", "relu", "gelu")


def make_actor_critic(
    torso: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    shared_torso: bool,
    obs_spec: ObservationSpec,
    action_spec: ActionSpec,
    log_std_init: float = 0.0,
) -> nn.Module:
    """The actor-critic network an agent config asks for (it sees the `obs` of a `MaskedObs`):
    logits for a `DiscreteSpec`, a Gaussian (`networks.GaussianActorCritic`, `log_std_init`)
    for a `BoxSpec`."""
    def body():
        return make_torso(torso, hidden_sizes, activation, obs_spec)

    critic = None if shared_torso else body()
    if isinstance(action_spec, BoxSpec):
        return networks.GaussianActorCritic(tuple(action_spec.shape), body(), critic, log_std_init)
    return networks.ActorCritic(action_spec.num_actions, body(), critic)


def make_torso(
    torso: str, hidden_sizes: tuple[int, ...], activation: str, obs_spec: ObservationSpec, layer_norm: bool = False
) -> nn.Module:
    """A fresh torso module of the kind a config names (`TORSOS`); `layer_norm` applies to
    the MLP and MinAtar torsos. Dict/NamedTuple observations, and "multi_encoder", get a
    structured torso (`podracer.networks.structured.structured_torso`)."""
    obs_spec = network_obs_spec(obs_spec)
    if torso == "multi_encoder" or networks_structured.is_structured(obs_spec):
        return networks_structured.structured_torso(torso, hidden_sizes, activation, obs_spec, layer_norm)
    check_cnn_observations(torso, tuple(obs_spec.shape))
    if torso == "mlp":
        return networks.MLP(tuple(hidden_sizes), activation, obs_ndim=len(obs_spec.shape), layer_norm=layer_norm)
    if torso == "minatar_cnn":
        return networks.MinAtarCNN(hidden_sizes=tuple(hidden_sizes), activation=activation, layer_norm=layer_norm)
    if torso in ("nature_cnn", "impala_cnn"):
        return getattr(networks, "NatureCNN" if torso == "nature_cnn" else "ImpalaCNN")()
    raise ValueError(f"unknown torso {torso!r}; choose one of {TORSOS}")


# the smallest height and width each CNN torso maps to a non-empty feature map
_CNN_MIN_SIZE = {"nature_cnn": 36, "minatar_cnn": 3, "impala_cnn": 1}


def check_cnn_observations(torso: str, shape: tuple[int, ...]) -> None:
    """A ConfigError (before anything compiles) unless a CNN torso's observations are
    images `[H, W, C]` large enough for its convolutions."""
    minimum = _CNN_MIN_SIZE.get(torso)
    if minimum is None:
        return
    if len(shape) != 3:
        raise ConfigError(f"agent.torso {torso!r} needs image observations [H, W, C], got shape {shape}; "
                          f"use agent.torso 'mlp' for vector observations")
    if min(shape[:2]) < minimum:
        raise ConfigError(f"agent.torso {torso!r} needs images of at least {minimum}x{minimum}, got shape {shape}")


def learning_rate(lr: float, anneal: bool, num_steps: int) -> float | optax.Schedule:
    """`lr`, or with `anneal` a linear decay from `lr` to 0 over `num_steps` optimizer steps
    that is exactly 0 from step `num_steps` on: `lr * max(N - count, 0) / N`, with the
    difference taken in integers (optax's `1 - count / N` can leave a step of one ulp)."""
    if not anneal:
        return lr
    n = max(1, int(num_steps))

    def schedule(count: Array) -> Array:
        remaining = jnp.maximum(n - count, 0).astype(jnp.float32)
        return lr * remaining / n

    return schedule


def init_params(network: nn.Module, key: PRNGKey, obs_spec: ObservationSpec) -> Params:
    """The network's parameters, from a zero batch of the observations it sees."""
    return network.init(key, zeros_like_spec(network_obs_spec(obs_spec), (1,)))


def make_init(init_params: Callable[[PRNGKey], Params], optimizer: optax.GradientTransformation):
    """`init(key) -> AgentState` for an agent whose state is its parameters (`init_params(key)`)
    and optimizer."""
    from podracer.types import AgentState

    def init(key: PRNGKey) -> AgentState:
        params = init_params(key)
        return AgentState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    return init


def policy_and_value(network: nn.Module, params: Params, obs: Observation) -> tuple[Any, Array]:
    """An actor-critic over a flat batch: `obs [N, ...] -> (out, value [N])`, the policy
    output `out` being logits `[N, A]` (illegal actions' `-inf` when the observations carry
    masks, `MaskedObs`) or a Gaussian's `(mean, log_std)`."""
    inputs, legal = split_mask(obs)
    out, value = network.apply(params, inputs)
    return (out if legal is None else masked_logits(out, legal)), value


CATEGORICAL = Categorical()


def make_sampling_act(
    network: nn.Module, policy: Policy = CATEGORICAL, value: bool = True
) -> Callable[[Params, Observation, PRNGKey], tuple[Array, dict]]:
    """`act(params, obs [B, ...], key) -> (action [B, ...], {"log_prob", "value", ...})`,
    sampling from the policy (a categorical over the legal actions only); `log_prob` is the
    behaviour policy's, for the loss (a Gaussian adds its unclipped sample, see
    `podracer.agents.policies`). With `value` False the extras hold no `"value"`, and the
    critic is not computed (XLA drops what nothing reads)."""

    def act(params: Params, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        out, values = policy_and_value(network, params, obs)
        action, extras = policy.sample(key, out)
        return action, ({**extras, "value": values} if value else extras)

    return act


def make_greedy_act(network: nn.Module, policy: Policy = CATEGORICAL) -> Callable[[Params, Observation], Array]:
    """`greedy_act(params, obs [B, ...]) -> action [B, ...]`: the policy's most likely
    action (the argmax of the logits among the legal actions; a Gaussian's mean, clipped to
    the box)."""

    def greedy_act(params: Params, obs: Observation) -> Array:
        out, _ = policy_and_value(network, params, obs)
        return policy.mode(out)

    return greedy_act


def concat_time(a: Any, b: Any) -> Any:
    """Two time-major trees `[T, ...]` joined along time, leaf by leaf: `[2T, ...]`."""
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=0), a, b)


def flatten_time_batch(tree: Any) -> Any:
    """`[T, B, ...] -> [T * B, ...]` for every leaf."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def random_permutation(key: PRNGKey, size: int) -> Array:
    """A uniformly random permutation of `range(size)`, drawn by one `random.bits` call
    with no key split (on CPU every threefry call is a loop of its own, and this runs every
    epoch): `jax.random.permutation`'s method, a sort by random keys, as an LSD radix sort.

    Each pass sorts one array of uint32 words, each a random key in the high bits and the
    element's position in the low `b = log2(size)` bits, so the sort is single-operand and
    its ties are broken by the previous pass's order; the passes together draw at least
    `2b + 9` random bits per element, so a tie in every pass (the method's only bias) has
    probability below 1e-3 per call at any size. XLA sorts one array of words several times
    faster than several arrays under a multi-key comparator (512 rows 100 -> 33 us, 8192
    rows 2.2 -> 0.6 ms on one CPU core). Up to 2^28 rows (17 passes there)."""
    bits = max(1, (size - 1).bit_length())
    if bits > 28:
        raise ValueError(f"random_permutation: {size} rows; at most 2^28 are supported")
    passes = -(-(2 * bits + 9) // (32 - bits))
    words = (jax.random.bits(key, (passes, size)) >> bits) << bits
    position, low = jnp.arange(size, dtype=jnp.uint32), jnp.uint32((1 << bits) - 1)
    permutation = jax.lax.sort(words[0] | position) & low
    for word in words[1:]:
        permutation = permutation[jax.lax.sort(word | position) & low]
    return permutation.astype(jnp.int32)


def shuffled_minibatches(key: PRNGKey, batch: Any, num_minibatches: int) -> Any:
    """Shuffle a flat batch `[N, ...]` and split it into `[num_minibatches, N / M, ...]`."""
    size = jax.tree.leaves(batch)[0].shape[0]
    if size % num_minibatches:
        raise ValueError(f"batch of {size} does not split into {num_minibatches} minibatches")
    permutation = random_permutation(key, size)
    return jax.tree.map(
        lambda x: jnp.take(x, permutation, axis=0).reshape(
            (num_minibatches, size // num_minibatches) + x.shape[1:]
        ),
        batch,
    )


def apply_time_major(network: nn.Module, params: Params, obs: Observation) -> tuple[Any, Array]:
    """The network over a time-major batch: `obs [T, B, ...] -> (out, value [T, B])`, the
    policy output `out` with `[T, B]` leading every leaf (logits `[T, B, A]`, illegal
    actions' `-inf` for masked observations, see `policy_and_value`)."""
    T, B = jax.tree.leaves(obs)[0].shape[:2]
    out, value = policy_and_value(network, params, flatten_time_batch(obs))
    return jax.tree.map(lambda x: x.reshape((T, B) + x.shape[1:]), out), value.reshape((T, B))


def vtrace_on_trajectory(
    traj: Trajectory,
    value: Array,
    next_value: Array,
    log_prob: Array,
    gamma: float,
    lambda_: float,
    clip_rho_threshold: float,
    clip_pg_rho_threshold: float,
) -> VTraceOutput:
    """V-trace over a `[T, B]` trajectory (vmapped over B), each output `[T, B]`.

    value / next_value: `V(obs)` and `V(next_obs)` under the current parameters; log_prob:
    the current policy's `log pi(action|obs)`; the behaviour's is `traj.extras["log_prob"]`.
    Terminated steps do not bootstrap; terminated or truncated ones cut the trace, and a
    truncated one bootstraps from `V(next_obs)`, its final observation. No gradient flows
    through the importance ratios, `next_value` or the targets.
    """
    rho = jax.lax.stop_gradient(jnp.exp(log_prob - traj.extras["log_prob"]))
    discount = gamma * (1.0 - traj.terminated.astype(jnp.float32))
    end = traj.terminated | traj.truncated
    vtrace = jax.vmap(vtrace_td_error_and_advantage, in_axes=(1, 1, 1, 1, 1, None, None, None, None, 1),
                      out_axes=1)
    return vtrace(value, jax.lax.stop_gradient(next_value), traj.reward, discount, rho,
                  lambda_, clip_rho_threshold, clip_pg_rho_threshold, True, end)


def sequence_minibatches(key: PRNGKey, batch: Any, num_minibatches: int) -> Any:
    """Shuffle a time-major batch `[T, B, ...]` along B, whole sequences together, and split
    it into `[num_minibatches, T, B / M, ...]` (for losses that need full sequences)."""
    batch_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
    minibatches = shuffled_minibatches(key, batch_major, num_minibatches)
    return jax.tree.map(lambda x: jnp.swapaxes(x, 1, 2), minibatches)


Minibatcher = Callable[[PRNGKey, Any, int], Any]


def check_step_metrics(names: Any, declared: tuple[str, ...], algorithm: str) -> None:
    """Trace-time guard for a replay agent: the metrics it averages over an update's gradient
    steps (`names`) are exactly its `Algorithm.step_metrics` (`declared`), which metrics rows
    average over gradient steps (`podracer.runner.agent_means`); a per-step metric added
    without declaring it would be diluted by the updates that take no step."""
    names = set(names)
    if names != set(declared):
        raise TypeError(f"{algorithm}: the per-step metrics {sorted(names)} differ from the declared step_metrics "
                        f"{sorted(declared)}; list every per-step metric in its Algorithm's step_metrics")


def make_sgd_epochs(
    grad_fn: Callable[[Params, Any], tuple[tuple[Array, dict], Any]],
    optimizer: optax.GradientTransformation,
    minibatches: Minibatcher,
    num_epochs: int,
    num_minibatches: int,
    unroll: bool = False,
    prepare_epoch: Callable[[Any], Any] | None = None,
) -> Callable[[Params, Any, Any, PRNGKey], tuple[Params, Any, dict]]:
    """`(params, opt_state, batch, key) -> (params, opt_state, metrics)`: `num_epochs`
    passes over `batch`, each split by `minibatches` into `num_minibatches` with one
    optimizer step apiece. `grad_fn` returns `((loss, metrics), grads)`; the metrics come
    back averaged over all steps. `unroll` unrolls both loops: XLA:CPU runs convolution
    gradients inside a loop body many times slower than outside one (Atari on CPU), at
    the price of a longer compile. `prepare_epoch`, if given, maps an epoch's stacked
    minibatches `[num_minibatches, ...]` before its steps: statistics of every minibatch
    at once (PPO's advantage normalisation, one collective per epoch, not one per step)."""

    def sgd_step(carry, minibatch):
        params, opt_state = carry
        (_, metrics), grads = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        metrics["grad_norm"] = global_norm(grads)
        return (optax.apply_updates(params, updates), opt_state), metrics

    def epoch(carry, key):
        params, opt_state, batch = carry
        epoch_minibatches = minibatches(key, batch, num_minibatches)
        if prepare_epoch is not None:
            epoch_minibatches = prepare_epoch(epoch_minibatches)
        (params, opt_state), metrics = jax.lax.scan(
            sgd_step, (params, opt_state), epoch_minibatches, unroll=unroll
        )
        return (params, opt_state, batch), metrics

    def run(params: Params, opt_state: Any, batch: Any, key: PRNGKey):
        (params, opt_state, _), metrics = jax.lax.scan(
            epoch, (params, opt_state, batch), jax.random.split(key, num_epochs), unroll=unroll
        )
        return params, opt_state, jax.tree.map(jnp.mean, metrics)

    return run


def global_norm(grads: Any) -> Array:
    """The L2 norm of all of `grads`, over one flat vector: the same value as
    `optax.tree.norm`, as one reduction instead of one per parameter array (and the same
    computation as a flattened optimizer's clipping, which XLA then computes once)."""
    return optax.tree.norm(ravel_pytree(grads)[0])


def successor_values(apply_value: Callable[[Array], Array], traj: Trajectory, value: Array) -> Array:
    """The values of `traj.next_obs`, `[T, B, ...]`, without a forward pass over all of them.

    `value [T, B, ...]` holds the behaviour's values of `traj.obs` (what `act` computed);
    `apply_value(obs [N, ...]) -> [N, ...]` evaluates the network (observations may be
    pytrees, each leaf `[T, B, ...]`). Where an episode went on,
    `next_obs[t]` is `obs[t + 1]`, whose value is `value[t + 1]`; only the last step (always,
    `[B]` observations) and truncated steps (their final observations, in a second pass over
    all of `next_obs` that runs only when some step before the last was truncated) need the
    network. Terminated steps keep a value that a learner must not bootstrap from.
    """
    last = apply_value(jax.tree.map(lambda x: x[-1], traj.next_obs))
    shifted = jnp.concatenate([value[1:], last[None]])
    T, B = traj.reward.shape

    def with_truncations(carry):
        _, values = carry
        exact = apply_value(flatten_time_batch(traj.next_obs))
        exact = exact.reshape((T, B) + exact.shape[1:])
        mask = traj.truncated.reshape((T, B) + (1,) * (exact.ndim - 2))
        return jnp.zeros_like(carry[0]), jnp.where(mask, exact, values)

    # A loop that runs its body at most once: `lax.cond` fails under vmap in shard_map.
    pending = jnp.any(traj.truncated[:-1])
    return jax.lax.while_loop(lambda carry: carry[0], with_truncations, (pending, shifted))[1]
