"""SAC's and TD3's modern critics (`agent.critic`): the categorical projection against a
NumPy oracle, FastTD3's distributional loss, CrossQ's joint forward pass and its batch
statistics (updated, synchronised across devices, restored on resume), and both critics
through the contract suite's checks (4 devices against 1, Anakin against Sebulba)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from anakin import AnakinConfig
from experiments import train as train_lib
from podracer.agents import SACConfig, TD3Config
from podracer.agents.continuous import critics as critics_lib
from podracer.agents.continuous import sac, td3
from podracer.config import Config, ConfigError, EnvConfig
from podracer.envs import make_jax_env
from podracer.ops import distributional
from podracer.replay import Transition
from tests.experiments.test_train import StopAfter
from tests.support.contract_helpers import anakin_vs_sebulba, one_vs_four_devices
from tests.support.helpers import assert_trees_equal

PROBE = "ProbeContinuousAction"
NEW_CRITICS = ("crossq", "distributional")


def projection_oracle(atoms: np.ndarray, probs: np.ndarray, r: float, discount: float) -> np.ndarray:
    """C51's projection as Bellemare et al. 2017's alg. 1 writes it: for each atom,
    `b = (Tz - v_min) / dz`, mass `(u - b)` to `floor(b) = l` and `(b - l)` to `ceil(b) = u`,
    all of it to `l` when `b` is whole."""
    v_min, v_max, K = atoms[0], atoms[-1], len(atoms)
    dz = (v_max - v_min) / (K - 1)
    out = np.zeros(K)
    for z, p in zip(atoms, probs):
        b = (min(max(r + discount * z, v_min), v_max) - v_min) / dz
        lo, up = int(np.floor(b)), int(np.ceil(b))
        if lo == up:
            out[lo] += p
        else:
            out[lo] += p * (up - b)
            out[up] += p * (b - lo)
    return out


def test_categorical_projection_matches_the_oracle():
    """Random distributions and returns, atoms landing between atoms, exactly on atoms, and
    beyond `v_min` / `v_max`; terminal (discount 0) and `gamma^n` discounts."""
    atoms = np.linspace(-5.0, 5.0, 11)
    rng = np.random.default_rng(0)
    cases = [
        (0.37, 0.99),
        (1.0, 1.0),
        (2.0, 0.5),
        (-4.0, 0.9**3),
        (4.0, 0.9**3),
        (20.0, 0.99),
        (-20.0, 0.99),
        (0.25, 0.0),
        (-9.0, 0.0),
        (0.0, 0.999**5),
    ]
    cases += [(float(rng.normal(0, 3)), float(rng.uniform(0, 1))) for _ in range(40)]
    probs = rng.dirichlet(np.ones(len(atoms)), size=len(cases)).astype(np.float32)
    r = np.array([c[0] for c in cases], np.float32)
    discount = np.array([c[1] for c in cases], np.float32)
    got = distributional.categorical_projection(jnp.asarray(atoms, jnp.float32), jnp.asarray(probs), r, discount)
    expected = np.stack([projection_oracle(atoms, p, ri, di) for p, ri, di in zip(probs, r, discount)])
    np.testing.assert_allclose(got, expected, atol=2e-5)
    np.testing.assert_allclose(np.sum(got, -1), 1.0, atol=1e-5)
    # a terminal transition's target is the return alone, projected (0.25: a quarter of the way 0 -> 1)
    np.testing.assert_allclose(got[7], np.eye(11)[5] * 0.75 + np.eye(11)[6] * 0.25, atol=1e-6)


def test_projection_adds_the_bonus_before_discounting():
    """SAC's entropy term shifts the next atoms: `r + discount (z + bonus)`."""
    atoms = np.linspace(-5.0, 5.0, 11)
    probs = np.random.default_rng(1).dirichlet(np.ones(11), size=3).astype(np.float32)
    r, discount, bonus = np.array([0.5, -1.0, 2.0]), np.array([0.9, 0.5, 0.0]), np.array([0.7, -1.3, 4.0])
    got = distributional.categorical_projection(
        jnp.asarray(atoms, jnp.float32),
        jnp.asarray(probs),
        jnp.asarray(r, jnp.float32),
        jnp.asarray(discount, jnp.float32),
        jnp.asarray(bonus, jnp.float32),
    )
    expected = [projection_oracle(atoms, p, ri + di * bi, di) for p, ri, di, bi in zip(probs, r, discount, bonus)]
    np.testing.assert_allclose(got, np.stack(expected), atol=2e-5)


def test_double_q_target_takes_the_twin_with_the_lower_expected_value():
    atoms = jnp.linspace(-1.0, 1.0, 5)
    low, high = jnp.array([[0.5, 0.5, 0, 0, 0]]), jnp.array([[0, 0, 0, 0.5, 0.5]])
    ones, zeros = jnp.ones(1), jnp.zeros(1)
    for a, b in ((low, high), (high, low)):
        target = distributional.categorical_double_q_target(atoms, a, b, zeros, ones)
        np.testing.assert_allclose(target, low, atol=1e-6)


def probe_batch(n: int = 64, seed: int = 0):
    env = make_jax_env(PROBE)
    obs_spec, action_spec = env.observation_spec(None), env.action_spec(None)
    keys = jax.random.split(jax.random.key(seed), 4)
    shape = (n,) + tuple(obs_spec.shape)
    dim = action_spec.shape[0]
    items = Transition(
        jax.random.normal(keys[0], shape),
        jax.random.uniform(keys[1], (n, dim), minval=-1),
        jax.random.normal(keys[2], (n,)),
        jnp.full((n,), 0.9),
        jax.random.normal(keys[3], shape),
    )
    return items, dim


@pytest.mark.parametrize("make", [SACConfig, TD3Config], ids=["sac", "td3"])
@pytest.mark.costly
def test_distributional_loss_decreases_on_a_fixed_batch(make):
    """FastTD3's critics fit a fixed batch's projected targets (fixed target critics): the
    cross-entropy falls, and the expected values the actor reads move towards the returns
    (half the items terminal: their target is the return's two-hot)."""
    config = make(critic="distributional", num_atoms=21, v_min=-5.0, v_max=5.0, hidden_sizes=(32, 32))
    critics = critics_lib.make_critics(config, None)
    items, dim = probe_batch()
    items = items._replace(
        discount=jnp.where(jnp.arange(64) % 2 == 0, 0.0, 0.9), reward=3.0 * jnp.tanh(items.obs.reshape(64, -1)[:, 0])
    )
    variables = critics.init(jax.random.key(0), items.obs[:1], items.action[:1])
    next_unit, bonus = jnp.zeros_like(items.action), jnp.zeros_like(items.reward)
    opt = optax.adam(3e-3)
    params = critics_lib.trainable(variables)
    opt_state = opt.init(params)
    grad = jax.jit(jax.value_and_grad(critics.loss, has_aux=True))
    losses = []
    q_before = critics.q(variables, items.obs, items.action)
    for _ in range(100):
        (loss, _), g = grad(params, variables, variables, items, items.action, next_unit, bonus)
        updates, opt_state = opt.update(g, opt_state)
        params = optax.apply_updates(params, updates)
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.5, losses[::10]
    q = critics.q({**variables, **params}, items.obs, items.action)
    assert q.shape == (2, 64) and float(jnp.max(jnp.abs(q))) <= 5.0
    terminal = items.reward[::2]
    assert float(jnp.mean(jnp.abs(q[:, ::2] - terminal))) < 0.7 * float(jnp.mean(jnp.abs(q_before[:, ::2] - terminal)))


@pytest.mark.costly
def test_crossq_normalises_current_and_next_batches_together():
    """By construction of the joint pass: in training mode the current Q depends on the next
    batch (shared batch statistics); the pass advances the running statistics; evaluation
    mode (the actor's) depends on each item alone."""
    critics = critics_lib.make_critics(SACConfig(critic="crossq", hidden_sizes=(32, 32)), None)
    items, dim = probe_batch()
    variables = critics.init(jax.random.key(0), items.obs[:1], items.action[:1])
    assert critics.has_target is False and "batch_stats" in variables
    params = critics_lib.trainable(variables)
    bonus = jnp.zeros_like(items.reward)

    def q_mean(next_obs, next_unit):
        _, (q, after) = critics.loss(
            params, variables, (), items._replace(next_obs=next_obs), items.action, next_unit, bonus
        )
        return q, after

    q0, after = q_mean(items.next_obs, jnp.zeros_like(items.action))
    q1, _ = q_mean(items.next_obs + 3.0, jnp.zeros_like(items.action))
    q2, _ = q_mean(items.next_obs, jnp.ones_like(items.action))
    assert abs(float(q0 - q1)) > 1e-3 and abs(float(q0 - q2)) > 1e-3
    stats, new_stats = variables["batch_stats"], after["batch_stats"]
    assert jax.tree.structure(stats) == jax.tree.structure(new_stats)
    steps = [x for path, x in jax.tree_util.tree_leaves_with_path(new_stats) if "steps" in jax.tree_util.keystr(path)]
    assert steps and all(np.all(np.asarray(s) == 1.0) for s in steps)
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(stats), jax.tree.leaves(new_stats)))
    np.testing.assert_allclose(
        critics.q(variables, items.obs[:8], items.action[:8]),
        critics.q(variables, items.obs, items.action)[:, :8],
        rtol=1e-6,
    )


@pytest.mark.parametrize("critic", ["twin", "crossq", "distributional"])
def test_the_bonus_enters_the_target_as_discounted_reward(critic):
    """Each critic's target is `r + discount (Q'(s', a') + bonus)`: a bonus `b` gives the loss
    of the reward `r + discount b` without a bonus (the distributional projection clips the
    shifted atoms either way). The twin critics keep targets, CrossQ's none. The logged
    `q_mean` is the mean of both critics' (expected) values, which the actor reads outside
    CrossQ's training mode."""
    config = SACConfig(critic=critic, hidden_sizes=(8,), num_atoms=11, v_min=-5.0, v_max=5.0)
    critics = critics_lib.make_critics(config, None)
    assert critics.has_target is (critic != "crossq")
    rng = np.random.default_rng(0)
    obs, next_obs, unit = (rng.uniform(-1, 1, (8, 3)).astype(np.float32) for _ in range(3))
    items = Transition(obs, unit, np.linspace(-2, 2, 8, dtype=np.float32), np.full(8, 0.9, np.float32), next_obs)
    bonus = np.linspace(-1.0, 1.5, 8, dtype=np.float32)

    @jax.jit
    def losses(items, bonus):
        variables = critics.init(jax.random.key(0), items.obs[:1], items.action[:1])
        target = variables if critics.has_target else ()
        params, next_unit = critics_lib.trainable(variables), -items.action
        with_bonus, (q_mean, _) = critics.loss(params, variables, target, items, items.action, next_unit, bonus)
        shifted = items._replace(reward=items.reward + items.discount * bonus)
        expected, _ = critics.loss(params, variables, target, shifted, items.action, next_unit, 0.0 * bonus)
        return with_bonus, expected, q_mean, critics.q(variables, items.obs, items.action)

    with_bonus, expected, q_mean, q = losses(items, bonus)
    np.testing.assert_allclose(with_bonus, expected, rtol=1e-5)
    assert q.shape == (2, 8)
    if critic != "crossq":
        np.testing.assert_allclose(q_mean, np.mean(q), rtol=1e-5)


def test_twin_critics_are_the_given_network():
    def init(key, obs, unit):
        return {"params": {"w": jnp.ones(2)}}

    def apply(variables, obs, unit):
        return jnp.stack([jnp.sum(unit, -1), -jnp.sum(unit, -1)]) * variables["params"]["w"][:, None]

    critics = critics_lib.twin_critics(init, apply)
    assert critics.init is init and critics.q is apply and critics.has_target is True
    np.testing.assert_array_equal(critics.q(init(None, None, None), None, jnp.ones((3, 2))), [[2.0] * 3, [-2.0] * 3])


def test_new_config_fields_are_validated():
    for field, value in (
        ("critic", "quantile"),
        ("num_atoms", 1),
        ("v_min", 10.0),
        ("renorm_momentum", 1.0),
        ("renorm_warmup", -1),
        ("adam_b1", 1.0),
    ):
        with pytest.raises(ConfigError, match=f"agent.{field}"):
            TD3Config(**{field: value})
    with pytest.raises(ConfigError, match="agent.torso"):
        SACConfig(critic="crossq", torso="simba")


def variant(algorithm, critic: str):
    """The algorithm's contract record with `critic` in its probe config."""
    probe = algorithm.probe_config
    return dataclasses.replace(algorithm, probe_config=lambda: dataclasses.replace(probe(), critic=critic))


ALGORITHMS = {"sac": sac.ALGORITHM, "td3": td3.ALGORITHM}
CASES = [(name, critic) for name in ALGORITHMS for critic in NEW_CRITICS]


def cases(fast: tuple[str, str] | None) -> list:
    """CASES with all but `fast` in the slow tier: each check compiles two whole runs."""
    return [pytest.param(*case, marks=() if case == fast else pytest.mark.slow) for case in CASES]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, critic", cases(fast=("td3", "crossq")))
@pytest.mark.costly
def test_update_on_four_devices_equals_the_global_batch_on_one(name, critic):
    """The contract suite's check with the new critics: CrossQ's batch statistics are
    averaged over devices, so 4 devices give the 1-device update, statistics included."""
    one_vs_four_devices(variant(ALGORITHMS[name], critic), PROBE)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, critic", cases(fast=None))
def test_anakin_and_sebulba_give_the_same_update(name, critic):
    anakin_vs_sebulba(variant(ALGORITHMS[name], critic), PROBE)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("make", [SACConfig, TD3Config], ids=["sac", "td3"])
def test_crossq_stop_and_resume_is_exact_with_the_batch_statistics(make, tmp_path):
    """An Anakin run with CrossQ's critics stopped after 2 host calls and resumed ends with
    the state of the same run uninterrupted, its moved batch statistics included."""
    run = Config(
        env=EnvConfig(PROBE),
        total_env_steps=8 * 4 * 12,
        agent=make(buffer_size=512, batch_size=16, learning_starts=64, hidden_sizes=(16,), critic="crossq"),
        arch=AnakinConfig(num_envs=4, rollout_length=8, updates_per_call=3, devices=(0, 1)),
    )
    full = train_lib.train(dataclasses.replace(run, run_dir=str(tmp_path / "full")), console=False)
    first = train_lib.train(
        dataclasses.replace(run, run_dir=str(tmp_path / "stopped")), console=False, should_stop=StopAfter(2)
    )
    assert first.stopped
    last = train_lib.resume(str(tmp_path / "stopped"))
    stats = last.state.agent.opt_state.critic["batch_stats"]
    steps = [x for path, x in jax.tree_util.tree_leaves_with_path(stats) if "steps" in jax.tree_util.keystr(path)]
    assert float(np.max(np.asarray(steps[0]))) > 0
    assert_trees_equal(last.state, full.state)
