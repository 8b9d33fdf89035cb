"""The actor-critic network of PPO and IMPALA, feed-forward or recurrent, behind one interface
(`ActorCriticModel`), so that each algorithm is written once for both.

A recurrent model is `torso -> ResetCore (LSTM or GRU) -> policy and value heads`; the core
state is reset to its initial value (zeros) wherever an episode starts, by the rule of
`podracer.networks.recurrent`, in acting (`act`, one step with the `start` flags the runner
carries) and in learning (`outputs` and `forward` unroll from `Trajectory.core` with
`Trajectory.start`, the flags acting used), so both see the same states.

Shapes: `outputs(params, traj)` gives `(out, value, next_value)` over a `[T, B]` trajectory
under `params`; `value` is `V(obs)`, `next_value` is `V(next_obs)` (a truncated step's final
observation is read with the state of the episode it ends, not reset). `prepare(tree)` turns
`[T, B, ...]` learner data into what `minibatches` splits: flat transitions `[T * B, ...]`
(feed-forward) or whole sequences `[T, B, ...]` (recurrent); `forward(params, inputs)` then
gives `(out, value)` shaped like a minibatch's leading axes (`[N]` or `[T, b]`).
`train_outputs` and `train_forward` are the same plus a scalar auxiliary loss that a loss
function adds: the auto-encoder's reconstruction loss with a latent (`latent_size > 0`,
`podracer.networks.latent`), 0 otherwise.

With a latent (feed-forward only), the torso feeds a small latent that the policy and value
heads read alone, and a decoder reconstructs the observation from it; the reconstruction
loss is trained jointly with the agent's loss, on the same minibatches (RLDM 2019's
auto-encoder, here with no pre-training phase): the latent then keeps what the policy and
value need *and* what describes the observation, it follows the agent's data as the policy
changes what it sees, and one program, one optimizer and one batch pipeline serve both.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer import networks
from podracer.agents.acting import apply_time_major, make_greedy_act, make_sampling_act, policy_and_value
from podracer.agents.minibatches import (
    Minibatcher,
    concat_time,
    flatten_time_batch,
    sequence_minibatches,
    shuffled_minibatches,
)
from podracer.agents.networks import init_params, make_actor_critic, make_torso
from podracer.agents.policies import Policy
from podracer.config import ConfigError, check
from podracer.networks.latent import Decoder, Encoder, LatentActorCritic, reconstruction_target
from podracer.networks.recurrent import CORES, CoreState, ResetCore, unroll
from podracer.ops import masked_logits, reconstruction_loss
from podracer.ops.losses import RECONSTRUCTIONS
from podracer.types import (
    ActionSpec,
    Array,
    BoxSpec,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    is_obs_spec,
    network_obs_spec,
    split_mask,
    zeros_like_spec,
)

CORE_KINDS = ("none",) + CORES


class ActorCriticModel(NamedTuple):
    """What PPO and IMPALA need of their network (see the module doc for shapes)."""

    init: Callable[[PRNGKey], Params]
    act: Callable[..., Any]  # an `ActFn`, or a `RecurrentActFn` when `initial_core` is set
    greedy_act: Callable[..., Any]
    initial_core: Callable[[int], CoreState] | None
    outputs: Callable[[Params, Trajectory], tuple[Any, Array, Array]]
    inputs: Callable[[Trajectory], Any]  # the part of a trajectory `forward` reads
    prepare: Callable[[Any], Any]  # `[T, B, ...]` data -> what `minibatches` splits
    minibatches: Minibatcher
    forward: Callable[[Params, Any], tuple[Any, Array]]
    # As `outputs` / `forward`, plus the auxiliary loss (reconstruction; 0 without a latent).
    train_outputs: Callable[[Params, Trajectory], tuple[Any, Array, Array, Array]]
    train_forward: Callable[[Params, Any], tuple[Any, Array, Array]]
    network: nn.Module | None = None  # the feed-forward network (None when recurrent)


def check_model_fields(config: Any) -> None:
    """ConfigError naming the field unless an actor-critic config's recurrent-core and latent
    settings work together (shared by PPO's and IMPALA's `__post_init__`): its `core`,
    `core_size`, `latent_size`, `reconstruction_coef`, `reconstruction`, `shared_torso` and
    `replay_fraction`."""
    check(config.core in CORE_KINDS, "agent.core", f"must be one of {CORE_KINDS}", config.core)
    check(config.core_size >= 1, "agent.core_size", "must be >= 1", config.core_size)
    latent_size, coef = config.latent_size, config.reconstruction_coef
    check(latent_size >= 0, "agent.latent_size", "must be >= 0 (0: no latent)", latent_size)
    check(coef >= 0 and coef == coef, "agent.reconstruction_coef", "must be >= 0", coef)
    check(config.reconstruction in RECONSTRUCTIONS, "agent.reconstruction", f"must be one of {RECONSTRUCTIONS}",
          config.reconstruction)
    check(latent_size == 0 or config.core == "none", "agent.latent_size",
          "must be 0 with a recurrent core (the latent is for feed-forward agents)", latent_size)
    check(latent_size == 0 or config.shared_torso, "agent.shared_torso",
          "must be true with a latent (the policy and value heads read one latent)", config.shared_torso)
    check(config.core == "none" or config.replay_fraction == 0, "agent.replay_fraction",
          "must be 0 with a recurrent core (replayed sequences do not keep core states)", config.replay_fraction)


def make_actor_critic_model(
    torso: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    shared_torso: bool,
    obs_spec: ObservationSpec,
    action_spec: ActionSpec,
    policy: Policy,
    *,
    core: str = "none",
    core_size: int = 128,
    log_std_init: float = 0.0,
    latent_size: int = 0,
    reconstruction: str = "mse",
) -> ActorCriticModel:
    """The model a config asks for: `core` "none" (feed-forward, `make_actor_critic`;
    with `latent_size > 0` a `LatentActorCritic` whose reconstruction loss is `reconstruction`,
    see `podracer.ops.reconstruction_loss`) or "lstm" / "gru" (`RecurrentActorCritic` of
    `core_size` units)."""
    if core == "none" and latent_size > 0:
        network = make_latent_actor_critic(torso, hidden_sizes, activation, obs_spec, action_spec, latent_size,
                                           log_std_init)
        return _with_latent(network, obs_spec, policy, reconstruction)
    if core == "none":
        return _feed_forward(make_actor_critic(
            torso, hidden_sizes, activation, shared_torso, obs_spec, action_spec, log_std_init), obs_spec, policy,
            act_values=shared_torso)
    if core not in CORES:
        raise ValueError(f"unknown core {core!r}; choose one of {CORE_KINDS}")
    if latent_size > 0:
        raise ValueError("a latent (latent_size > 0) is for feed-forward models only")
    heads = _heads(hidden_sizes[-1], activation, shared_torso, action_spec, log_std_init)
    net = RecurrentActorCritic(make_torso(torso, hidden_sizes, activation, obs_spec),
                               ResetCore(core, core_size), heads)
    return _recurrent(net, obs_spec, policy)


def _heads(size: int, activation: str, shared: bool, action_spec: ActionSpec, log_std_init: float) -> nn.Module:
    """Policy and value heads over the core's output: one hidden layer each (or shared)."""
    def body():
        return networks.MLP((size,), activation)

    critic = None if shared else body()
    if isinstance(action_spec, BoxSpec):
        return networks.GaussianActorCritic(tuple(action_spec.shape), body(), critic, log_std_init)
    return networks.ActorCritic(action_spec.num_actions, body(), critic)


def make_latent_actor_critic(torso: str, hidden_sizes: tuple[int, ...], activation: str, obs_spec: ObservationSpec,
                             action_spec: ActionSpec, latent_size: int, log_std_init: float = 0.0) -> LatentActorCritic:
    """`torso -> Dense(latent_size)` shared by linear policy and value heads, and a decoder
    (one hidden layer of `hidden_sizes[-1]` units) back to the observation's shape."""
    if not is_obs_spec(network_obs_spec(obs_spec)):
        raise ConfigError("agent.latent_size: the latent's decoder reconstructs array observations, and these are "
                          "structured (dict/NamedTuple); set it to 0")
    encoder = Encoder(make_torso(torso, hidden_sizes, activation, obs_spec), latent_size, activation)
    identity = networks.MLP((), activation)  # no layer: the heads are linear in the latent
    if isinstance(action_spec, BoxSpec):
        heads = networks.GaussianActorCritic(tuple(action_spec.shape), identity, None, log_std_init)
    else:
        heads = networks.ActorCritic(action_spec.num_actions, identity, None)
    obs_shape = tuple(network_obs_spec(obs_spec).shape)
    return LatentActorCritic(encoder, heads, Decoder(obs_shape, hidden_sizes[-1], activation))


def _with_latent(network: LatentActorCritic, obs_spec: ObservationSpec, policy: Policy,
                 reconstruction: str) -> ActorCriticModel:
    """`_feed_forward`'s model (acting runs the encoder and heads only), initialised with
    the decoder, whose learning functions add the reconstruction loss from the same pass."""

    def apply(params: Params, obs: Observation, num_decoded: int | None):
        inputs, legal = split_mask(obs)
        out, value, prediction = network.apply(params, inputs, num_decoded,
                                               method=LatentActorCritic.with_reconstruction)
        loss = reconstruction_loss(prediction, reconstruction_target(inputs[:num_decoded]), reconstruction)
        return (out if legal is None else masked_logits(out, legal)), value, loss

    def train_outputs(params: Params, traj: Trajectory):
        T, B = traj.reward.shape
        obs = flatten_time_batch(concat_time(traj.obs, traj.next_obs))
        out, value, loss = apply(params, obs, T * B)  # decodes `obs`, the first `T * B`
        out = jax.tree.map(lambda x: x.reshape((2 * T, B) + x.shape[1:])[:T], out)
        value = value.reshape((2 * T, B))
        return out, value[:T], value[T:], loss

    def init(key: PRNGKey) -> Params:
        obs = zeros_like_spec(network_obs_spec(obs_spec), (1,))
        return network.init(key, obs, method=LatentActorCritic.with_reconstruction)

    return _feed_forward(network, obs_spec, policy)._replace(
        init=init, train_outputs=train_outputs, train_forward=lambda params, obs: apply(params, obs, None))


def _feed_forward(network: nn.Module, obs_spec: ObservationSpec, policy: Policy,
                  act_values: bool = True) -> ActorCriticModel:
    """`act_values`: whether acting computes `V(obs)` (extras `"value"`). Worth it only where
    the value is a head on the policy's torso (nearly free per step, and it spares PPO's
    update a pass through the torso). A critic with a torso of its own would cost a whole
    network per step; without it the update computes `V(obs)` for the rollout in one batched
    pass (`ppo.gae_values`), fewer and larger kernels (CartPole on one CPU core: about 3%
    faster training), and actors carry no values."""

    def outputs(params: Params, traj: Trajectory):
        T = traj.reward.shape[0]
        out, values = apply_time_major(network, params, concat_time(traj.obs, traj.next_obs))
        return jax.tree.map(lambda x: x[:T], out), values[:T], values[T:]

    return ActorCriticModel(
        init=lambda key: init_params(network, key, obs_spec),
        act=make_sampling_act(network, policy, value=act_values),
        greedy_act=make_greedy_act(network, policy),
        initial_core=None,
        outputs=outputs,
        inputs=lambda traj: traj.obs,
        prepare=flatten_time_batch,
        minibatches=shuffled_minibatches,
        forward=lambda params, obs: policy_and_value(network, params, obs),
        network=network,
        train_outputs=lambda params, traj: (*outputs(params, traj), jnp.zeros(())),
        train_forward=lambda params, obs: (*policy_and_value(network, params, obs), jnp.zeros(())),
    )


class RecurrentActorCritic(NamedTuple):
    """`torso -> core -> heads`, three flax modules with parameters `{"torso", "core",
    "heads"}`: the torso and heads run over every step at once, the core steps through time."""

    torso: nn.Module  # obs [N, ...] -> [N, H]
    core: ResetCore
    heads: nn.Module  # [N, core.size] -> (out, value [N])

    def init(self, key: PRNGKey, obs_spec: ObservationSpec) -> Params:
        torso_key, core_key, heads_key = jax.random.split(key, 3)
        obs = zeros_like_spec(network_obs_spec(obs_spec), (1,))
        torso = self.torso.init(torso_key, obs)
        embedding = self.torso.apply(torso, obs)
        core = self.core.init(core_key, self.core.initial_state(1), embedding, jnp.zeros((1,), bool))
        heads = self.heads.init(heads_key, jnp.zeros((1, self.core.size), jnp.float32))
        return {"torso": torso, "core": core, "heads": heads}

    def step(self, params: Params, state: CoreState, obs: Observation, start: Array):
        """One step of a batch: `(state, obs [B, ...], start [B]) -> (state, (out, value [B]))`."""
        inputs, legal = split_mask(obs)
        state, y = self.core.apply(params["core"], state, self.torso.apply(params["torso"], inputs), start)
        return state, self._heads(params, y, legal)

    def unroll(self, params: Params, state: CoreState, obs: Observation, start: Array):
        """Through a sequence: `(state before step 0, obs [T, B, ...], start [T, B]) ->
        (states [T, B, ...] after each step, (out, value) [T, B])`."""
        inputs, legal = split_mask(obs)
        T, B = start.shape
        embedding = self.torso.apply(params["torso"], flatten_time_batch(inputs))
        embedding = embedding.reshape((T, B) + embedding.shape[1:])

        states, y = unroll(self.core, params["core"], state, embedding, start)
        out, value = self._heads(params, y.reshape((T * B, -1)), None)
        out = jax.tree.map(lambda x: x.reshape((T, B) + x.shape[1:]), out)
        if legal is not None:
            out = masked_logits(out, legal)
        return states, (out, value.reshape((T, B)))

    def _heads(self, params: Params, y: Array, legal: Array | None):
        out, value = self.heads.apply(params["heads"], y)
        return (out if legal is None else masked_logits(out, legal)), value


def _recurrent(net: RecurrentActorCritic, obs_spec: ObservationSpec, policy: Policy) -> ActorCriticModel:
    def act(params: Params, obs: Observation, key: PRNGKey, core: CoreState, start: Array):
        core, (out, value) = net.step(params, core, obs, start)
        action, extras = policy.sample(key, out)
        return action, {**extras, "value": value}, core

    def greedy_act(params: Params, obs: Observation, core: CoreState, start: Array):
        core, (out, _) = net.step(params, core, obs, start)
        return policy.mode(out), core

    def forward(params: Params, inputs: tuple[Observation, Array, CoreState]):
        obs, start, core = inputs
        return net.unroll(params, jax.tree.map(lambda x: x[0], core), obs, start)[1]

    def outputs(params: Params, traj: Trajectory):
        states, (out, value) = net.unroll(params, jax.tree.map(lambda x: x[0], traj.core), traj.obs, traj.start)
        # V(next_obs[t]): one more step from the state after step t, not reset (a truncated
        # step's final observation belongs to the episode it ends; where the episode went on,
        # it is obs[t + 1] read from the same state, as the unroll did).
        T, B = traj.start.shape
        flat = jax.tree.map(lambda x: x.reshape((T * B,) + x.shape[2:]), (states, traj.next_obs))
        _, (_, next_value) = net.step(params, flat[0], flat[1], jnp.zeros((T * B,), bool))
        return out, value, next_value.reshape((T, B))

    return ActorCriticModel(
        init=lambda key: net.init(key, obs_spec),
        act=act,
        greedy_act=greedy_act,
        initial_core=net.core.initial_state,
        outputs=outputs,
        inputs=lambda traj: (traj.obs, traj.start, traj.core),
        prepare=lambda tree: tree,
        minibatches=sequence_minibatches,
        forward=forward,
        train_outputs=lambda params, traj: (*outputs(params, traj), jnp.zeros(())),
        train_forward=lambda params, inputs: (*forward(params, inputs), jnp.zeros(())),
    )
