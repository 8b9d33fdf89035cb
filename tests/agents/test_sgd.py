"""The on-policy agents' SGD loop against a NumPy loop over the same minibatches, their
initial state, and the trace-time check of a replay agent's per-step metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer.agents.sgd import check_step_metrics, make_init, make_sgd_epochs

N, EPOCHS, MINIBATCHES, LR, DECAY = 8, 3, 2, 0.1, 0.5


def permuted_minibatches(key, batch, num_minibatches):
    """`batch`'s rows in `jax.random.permutation(key)` order, `[num_minibatches, N / M, ...]`."""
    order = jax.random.permutation(key, N)
    return jax.tree.map(lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), batch)


def grad_fn(params, minibatch):
    """Least squares `0.5 mean((x w - y)^2)`, its `loss` metric and gradient."""
    x, y = minibatch

    def loss(params):
        value = 0.5 * jnp.mean(jnp.square(x @ params["w"] - y))
        return value, {"loss": value}

    return jax.value_and_grad(loss, has_aux=True)(params)


def numpy_epochs(w, x, y, key, scale_x):
    """The same SGD, weight decay `DECAY` included (`w -= LR (g + DECAY w)`), in NumPy."""
    losses, norms = [], []
    orders = np.asarray(jax.vmap(lambda k: jax.random.permutation(k, N))(jax.random.split(key, EPOCHS)))
    for order in orders:
        for rows in np.split(order, MINIBATCHES):
            xb, yb = x[rows] * scale_x, y[rows]
            error = xb @ w - yb
            grad = xb.T @ error / len(rows)
            losses.append(0.5 * np.mean(error**2))
            norms.append(np.linalg.norm(grad))
            w = w - LR * (grad + DECAY * w)
    return w, np.mean(losses), np.mean(norms)


def test_sgd_epochs_take_a_step_per_minibatch_of_each_epochs_permutation():
    """`EPOCHS` passes, each over the minibatches its own key draws, one optimizer step each
    (the optimizer given the parameters: weight decay reads them); the metrics, `grad_norm`
    among them, are the mean over every step; `prepare_epoch` maps each epoch's minibatches
    (here doubling `x`)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(N, 2)).astype(np.float32), rng.normal(size=N).astype(np.float32)
    w0 = np.array([0.5, -1.0], np.float32)
    optimizer = optax.chain(optax.add_decayed_weights(DECAY), optax.sgd(LR))
    key = jax.random.key(7)
    double_x = lambda minibatches: (minibatches[0] * 2.0, minibatches[1])  # noqa: E731
    run = make_sgd_epochs(grad_fn, optimizer, permuted_minibatches, EPOCHS, MINIBATCHES, prepare_epoch=double_x)
    params = {"w": jnp.asarray(w0)}
    params, _, metrics = jax.jit(run)(params, optimizer.init(params), (x, y), key)
    w, loss, norm = numpy_epochs(w0.astype(np.float64), x, y, key, scale_x=2.0)
    np.testing.assert_allclose(params["w"], w, rtol=1e-5)
    assert sorted(metrics) == ["grad_norm", "loss"]
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["grad_norm"], norm, rtol=1e-5)


def test_init_holds_the_keys_parameters_their_optimizer_state_and_no_update():
    optimizer = optax.adam(1e-3)
    init = make_init(lambda key: {"w": jax.random.normal(key, (3,))}, optimizer)
    state = jax.jit(init)(jax.random.key(4))
    np.testing.assert_array_equal(state.params["w"], jax.random.normal(jax.random.key(4), (3,)))
    expected = optimizer.init(state.params)
    for got, want in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(got, want)
    assert state.update_count.dtype == jnp.int32 and state.update_count.shape == () and int(state.update_count) == 0
    assert state.local is None


def test_step_metrics_must_be_the_declared_ones_in_any_order():
    check_step_metrics(["q", "loss"], ("loss", "q"), "dqn")
    message = (
        "sac: the per-step metrics ['loss'] differ from the declared step_metrics ['loss', 'q']; "
        "list every per-step metric in its Algorithm's step_metrics"
    )
    with pytest.raises(TypeError) as error:
        check_step_metrics({"loss": 0}, ("loss", "q"), "sac")
    assert str(error.value) == message


def scan_unrolls(jaxpr) -> list:
    """The `unroll` of every `scan` in a jaxpr, outermost first."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            found.append(eqn.params["unroll"])
            found += scan_unrolls(eqn.params["jaxpr"].jaxpr)
    return found


def test_unroll_unrolls_both_loops_and_only_when_asked():
    """XLA:CPU runs convolution gradients in a loop body many times slower: `unroll` must
    unroll the epochs' loop and each epoch's minibatch loop (traced only, nothing compiles)."""
    optimizer = optax.sgd(LR)
    params = {"w": jnp.zeros(2)}
    batch = (np.zeros((N, 2), np.float32), np.zeros(N, np.float32))
    args = (params, optimizer.init(params), batch, jax.random.key(0))
    default = make_sgd_epochs(grad_fn, optimizer, permuted_minibatches, EPOCHS, MINIBATCHES)
    assert scan_unrolls(jax.make_jaxpr(default)(*args).jaxpr) == [1, 1]
    unrolled = make_sgd_epochs(grad_fn, optimizer, permuted_minibatches, EPOCHS, MINIBATCHES, unroll=True)
    assert scan_unrolls(jax.make_jaxpr(unrolled)(*args).jaxpr) == [EPOCHS, MINIBATCHES]
