"""The prefix-adder host environment (Sebulba) and its reward pool: agreement with the JAX
form, the cache that never synthesises a graph twice and refuses another toolchain's costs,
bounded waits, and synthesis with Yosys/ABC (pyosys) onto the packaged cell library."""

import concurrent.futures as cf
import dataclasses
import json
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.prefix import graph as G
from experiments.prefix import host_env, synthesis
from experiments.prefix.builders import classic_adders, sklansky
from experiments.prefix.env import PrefixAdderEnv
from experiments.prefix.front import Design, pareto_front
from experiments.prefix.host_env import PrefixHostEnv, prefix_host_specs
from experiments.prefix.reward_pool import CacheMismatch, RewardPool, RewardTimeout, analytic_cost
from experiments.prefix.synthesis import SynthesisResult, SynthesisUnavailable, find_synthesis
from podracer.config import EnvConfig
from podracer.envs.base import EnvState
from podracer.envs.host import host_env_specs, make_host_env


def random_graphs(n, count, seed):
    rng = np.random.default_rng(seed)
    return np.stack([G.random_graph(rng, n, rng.random() * 0.3) for _ in range(count)])


@pytest.mark.slow
def test_host_and_jax_forms_agree_on_dynamics_observations_and_rewards():
    """Same start graphs, same actions: same graphs, masks, observations, rewards and
    truncations, through auto-resets (both forms reset to Sklansky here)."""
    n, num_envs, steps = 8, 5, 11
    kwargs = {"area_weight": 0.4, "horizon": 4, "reset": "sklansky", "fanout_weight": 0.25}
    jax_env = PrefixAdderEnv(n, **kwargs)
    host = PrefixHostEnv(num_envs, seed=0, bits=n, **kwargs)
    start = random_graphs(n, num_envs, seed=1)
    host_obs = host.set_graphs(start, np.full(num_envs, 0.4))
    inner, jax_obs = jax.vmap(jax_env.make_state, in_axes=(0, None))(jnp.asarray(start), 0.4)
    state = EnvState(inner, jnp.zeros(num_envs, jnp.int32), jnp.zeros(num_envs, jnp.float32))
    step = jax.jit(jax.vmap(jax_env.step))
    rng = np.random.default_rng(2)
    truncations = []
    for t in range(steps):
        np.testing.assert_allclose(host_obs.obs, jax_obs.obs, rtol=1e-6)
        np.testing.assert_array_equal(host_obs.action_mask, jax_obs.action_mask)
        action = np.array([rng.choice(np.flatnonzero(m)) for m in host_obs.action_mask])
        action[0] = 0  # illegal: both leave the graph alone
        host.send(action)
        out = host.recv().timestep
        state, timestep = step(jax.random.split(jax.random.key(t), num_envs), state, jnp.asarray(action))
        np.testing.assert_allclose(out.reward, timestep.reward, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out.truncated, timestep.truncated)
        np.testing.assert_allclose(out.final_obs.obs, timestep.final_obs.obs, rtol=1e-6)
        np.testing.assert_allclose(out.episode_return, timestep.episode_return, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(host.graphs, state.inner.nodes)
        host_obs, jax_obs = out.obs, timestep.obs
        truncations.append(out.truncated.all())
    assert np.flatnonzero(truncations).tolist() == [3, 7]


def test_host_env_by_id_and_its_specs():
    env = make_host_env(EnvConfig("PrefixAdder-8-w0.5", max_episode_steps=3), num_envs=2, seed=0)
    obs_spec, action_spec = host_env_specs(EnvConfig("PrefixAdder-8-w0.5"))
    assert env.observation_spec == obs_spec and env.action_spec == action_spec
    assert obs_spec.obs.shape == (8, 8, 4) and obs_spec.action_mask.shape == (128,)
    obs = env.reset()
    assert obs.obs.shape == (2, 8, 8, 4) and obs.action_mask.dtype == bool
    for _ in range(3):
        env.send(np.array([np.flatnonzero(m)[0] for m in obs.action_mask]))
        step = env.recv()
        obs = step.timestep.obs
    assert step.timestep.truncated.all() and step.episode_end.all()


def test_missing_pyosys_is_one_line_naming_the_pip_package(monkeypatch):
    monkeypatch.setattr(synthesis, "pyosys_version", lambda: None)
    with pytest.raises(SynthesisUnavailable, match="pip install pyosys") as error:
        prefix_host_specs("PrefixAdderSynth-16")
    assert "\n" not in str(error.value)
    from experiments.overrides import apply_overrides
    from experiments.presets import PRESETS
    from podracer.config import ConfigError
    from sebulba.runner import setup

    config = apply_overrides(PRESETS["dqn-cartpole-sebulba"](), ["--env.id", "PrefixAdderSynth-16"])
    with pytest.raises(ConfigError, match="env.id: synthesis rewards need .* pip install pyosys"):
        setup(config)


class CountingCost:
    """An analytic cost that counts its calls (threads share it) and can be slowed down."""

    def __init__(self, delay_s=0.0):
        self.calls, self.delay_s, self.lock = 0, delay_s, threading.Lock()

    def __call__(self, nodes):
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_s)
        return SynthesisResult(float(G.area(nodes)), G.delay(nodes), self.delay_s)


def test_reward_pool_cache_persists_and_a_resumed_run_never_synthesises_twice(tmp_path):
    path = str(tmp_path / "cache" / "costs.jsonl")
    graphs = list(random_graphs(8, 12, seed=3)) + list(classic_adders(8).values())
    count = CountingCost()
    with RewardPool(evaluate=count, identity="analytic", executor=cf.ThreadPoolExecutor(2), cache_path=path) as pool:
        costs = pool.costs(graphs + graphs[:5], timeout_s=30)  # duplicates: cache or in-flight hits
        unique = len({g.tobytes() for g in graphs})
        assert count.calls == unique and pool.metrics()["syntheses"] == unique
        assert pool.metrics()["cache_hit_rate"] == pytest.approx(1 - unique / (len(graphs) + 5))
    np.testing.assert_array_equal(costs[:, 0], [G.area(g) for g in graphs + graphs[:5]])
    with open(path, "a") as f:
        f.write('{"key": "cut by a cra')  # a crash mid-write loses one line, nothing else
    resumed = CountingCost()
    with RewardPool(evaluate=resumed, identity="analytic", executor=cf.ThreadPoolExecutor(2), cache_path=path) as pool:
        np.testing.assert_array_equal(pool.costs(graphs, timeout_s=30), costs[:len(graphs)])
        assert resumed.calls == 0 and pool.metrics()["cache_hit_rate"] == 1.0
        pool.costs([random_graphs(9, 1, seed=4)[0]], timeout_s=30)
        assert resumed.calls == 1
    with pytest.raises(CacheMismatch, match="written with identity analytic, not with this installation's "
                                            "identity other-flow"):  # another flow or library: refused
        RewardPool(evaluate=CountingCost(), identity="other-flow", executor=cf.ThreadPoolExecutor(1), cache_path=path)
    with open(path) as f:
        lines = f.read().splitlines()
    assert json.loads(lines[0]) == {"toolchain": {"identity": "analytic"}}
    assert lines[-2] == '{"key": "cut by a cra' and "key" in json.loads(lines[-1])  # a new row starts its own line


def test_a_damaged_cache_line_that_is_not_utf8_costs_that_line_only(tmp_path):
    """Bytes that are not UTF-8 (a damaged disk block) spoil their own line, not the whole
    cache: the pool and `cache_designs` still read every other row."""
    from experiments.prefix.reward_pool import cache_designs

    path = tmp_path / "costs.jsonl"
    graphs = list(classic_adders(8).values())
    with RewardPool(evaluate=analytic_cost, identity="a", executor=cf.ThreadPoolExecutor(1),
                    cache_path=str(path)) as pool:
        costs = pool.costs(graphs, timeout_s=30)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1] + [b"\xff\xfe garbage\n"] + lines[2:]))
    resumed = CountingCost()
    with RewardPool(evaluate=resumed, identity="a", executor=cf.ThreadPoolExecutor(1),
                    cache_path=str(path)) as pool:
        np.testing.assert_array_equal(pool.costs(graphs, timeout_s=30), costs)
        assert resumed.calls == 1  # the damaged row's graph only
    assert len(cache_designs(str(path), "a")) == len(graphs)  # three survivors and the one synthesised again


@pytest.mark.costly
def test_reward_pool_waits_are_bounded_and_errors_surface():
    slow = CountingCost(delay_s=2.0)
    with RewardPool(evaluate=slow, identity="slow", executor=cf.ThreadPoolExecutor(1)) as pool:
        future = pool.submit(sklansky(8))  # returns at once
        start = time.perf_counter()
        with pytest.raises(RewardTimeout, match="did not arrive within 0.2 s"):
            pool.wait([future], timeout_s=0.2)
        assert time.perf_counter() - start < 1.5
        assert pool.wait([future], timeout_s=30)[0, 0] == G.area(sklansky(8))

    def broken(nodes):
        raise RuntimeError("abc crashed")

    with RewardPool(evaluate=broken, identity="broken", executor=cf.ThreadPoolExecutor(1)) as pool, \
            pytest.raises(RuntimeError, match="abc crashed"):
        pool.costs([sklansky(8)], timeout_s=30)


def test_a_cache_file_that_cannot_be_written_fails_at_once_naming_it(tmp_path, monkeypatch):
    """A cache path that cannot be appended to is refused when the pool is made (and by the
    host env's specs, naming the variable); one that breaks later fails its requests at
    once instead of leaving them to the reward timeout."""
    with pytest.raises(ValueError, match="synthesis cache .* cannot be read and appended to"):
        RewardPool(evaluate=analytic_cost, identity="a", executor=cf.ThreadPoolExecutor(1), cache_path=str(tmp_path))
    monkeypatch.setenv("PODRACER_PREFIX_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match=r"^\$PODRACER_PREFIX_CACHE: the synthesis cache"):
        prefix_host_specs("PrefixAdderSynth-8")
    path = tmp_path / "costs.jsonl"
    with RewardPool(evaluate=analytic_cost, identity="a", executor=cf.ThreadPoolExecutor(1),
                    cache_path=str(path)) as pool:
        path.unlink()
        path.mkdir()  # the file can no longer be appended to
        start = time.perf_counter()
        with pytest.raises(IsADirectoryError):
            pool.costs([sklansky(8)], timeout_s=30)
        assert time.perf_counter() - start < 10 and pool.cached(sklansky(8)) is None


def test_requests_cancelled_by_an_executor_shutdown_fail_at_once():
    """Work the executor cancels (`close()` of the pool's own one, or a user executor shut
    down) fails its waiters with CancelledError, instead of a RewardTimeout much later."""
    executor = cf.ThreadPoolExecutor(1)
    pool = RewardPool(evaluate=CountingCost(delay_s=1.0), identity="slow", executor=executor)
    futures = [pool.submit(g) for g in random_graphs(8, 3, seed=6)]
    executor.shutdown(wait=False, cancel_futures=True)  # the first runs on, the others are cancelled
    start = time.perf_counter()
    with pytest.raises(cf.CancelledError):
        pool.wait(futures[1:], timeout_s=30)
    assert time.perf_counter() - start < 10
    assert pool.wait(futures[:1], timeout_s=30).shape == (1, 2)


def test_reward_pool_default_executor_is_a_process_pool(tmp_path):
    with RewardPool(evaluate=analytic_cost, identity="analytic", workers=1) as pool:
        assert isinstance(pool._executor, cf.ProcessPoolExecutor)
        costs = pool.costs(list(classic_adders(16).values()), timeout_s=240)
    np.testing.assert_array_equal(costs, [[G.area(g), G.delay(g)] for g in classic_adders(16).values()])


def test_structure_preserving_synthesis_keeps_the_classic_order_at_32_bits():
    spec = find_synthesis()
    got = {name: synthesis.synthesize(g, spec) for name, g in classic_adders(32).items()}
    delay = {name: r.delay for name, r in got.items()}
    area = {name: r.area for name, r in got.items()}
    assert delay["kogge-stone"] < delay["sklansky"] < delay["brent-kung"] < delay["ripple"], delay
    assert area["ripple"] < area["brent-kung"] < area["sklansky"] < area["kogge-stone"], area


def test_synthesis_is_deterministic_across_calls_and_yosys_processes():
    """A real 8-bit adder through pyosys onto the packaged library: positive area and delay,
    the same twice in one Yosys process and again in another (another thread's)."""
    spec = find_synthesis()
    assert spec.toolchain.startswith("pyosys ") and spec.liberty == synthesis.LIBERTY
    nodes = random_graphs(8, 1, seed=3)[0]
    first, second = synthesis.synthesize(nodes, spec), synthesis.synthesize(nodes, spec)
    assert first.area > 0 and first.delay > 0 and first[:2] == second[:2]
    with cf.ThreadPoolExecutor(1) as other:  # a new thread starts a Yosys process of its own
        third = other.submit(synthesis.synthesize, nodes, spec).result()
        assert other.submit(lambda: synthesis.yosys_process().pid).result() != synthesis.yosys_process().pid
    assert third[:2] == first[:2]


@pytest.mark.slow
def test_a_yosys_process_does_not_grow_with_its_syntheses():
    """A long run's Yosys process frees what each synthesis made (about 0.1 MB a synthesis
    without Yosys's garbage collection of names)."""
    spec = find_synthesis()
    graphs = random_graphs(16, 70, seed=11)

    def resident_mb():
        with open(f"/proc/{synthesis.yosys_process().pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    for nodes in graphs[:10]:
        synthesis.synthesize(nodes, spec)
    before = resident_mb()
    for nodes in graphs[10:]:
        synthesis.synthesize(nodes, spec)
    assert resident_mb() - before < 2.5


def test_a_synthesis_that_runs_past_its_timeout_is_a_synthesis_error_and_the_next_one_works():
    """A Yosys process that does not answer within `timeout_s` is ended (SynthesisError naming
    the timeout); the thread's next synthesis starts a fresh one."""
    spec = find_synthesis()
    synthesis.synthesize(sklansky(8), spec)  # the thread's Yosys process is running
    with pytest.raises(synthesis.SynthesisError, match=r"did not finish its commands within 0.001 s"):
        synthesis.synthesize(classic_adders(32)["kogge-stone"], dataclasses.replace(spec, timeout_s=0.001))
    assert synthesis.synthesize(sklansky(8), spec).area > 0


def test_a_failing_synthesis_is_one_line_and_the_next_one_works(tmp_path):
    """Yosys ends its process on an error: the caller gets a SynthesisError on one line with
    Yosys's message (never a dead caller), and the next synthesis runs in a fresh process."""
    spec = find_synthesis()
    broken = tmp_path / "broken.lib"
    broken.write_text("library (broken) {\n  cell (x) { area : 1;\n")
    with pytest.raises(synthesis.SynthesisError, match="Yosys exited with status 1 during its commands: .*ABC") as error:
        synthesis.synthesize(sklansky(8), dataclasses.replace(spec, liberty=str(broken)))
    assert "\n" not in str(error.value)
    assert synthesis.synthesize(sklansky(8), spec).area > 0


def test_the_mapped_adder_is_formally_an_adder():
    """Yosys proves the netlist ABC mapped onto the library's cells (their Liberty functions)
    equal to `a + b` for every input (SAT on a miter); a wrong reference fails the proof."""
    from experiments.prefix.netlist import to_verilog

    spec = find_synthesis()
    n = 16
    reference = (f"module reference(input [{n - 1}:0] a, input [{n - 1}:0] b, output [{n}:0] s);\n"
                 "  assign s = a + b;\nendmodule\n")
    proof = synthesis.synthesis_commands(spec) + [
        ["read_liberty", "-ignore_miss_func", spec.liberty], ["read_verilog", "{dir}/reference.v"], ["proc"],
        ["miter", "-equiv", "-flatten", "-make_assert", "prefix_adder", "reference", "miter"],
        ["hierarchy", "-top", "miter"], ["sat", "-verify", "-prove-asserts", "miter"]]
    adder = to_verilog(random_graphs(n, 1, seed=7)[0])
    log = synthesis.run_yosys(proof, {"adder.v": adder, "reference.v": reference})
    assert "sky130_fd_sc_hd__" in log and "SUCCESS!" in log
    with pytest.raises(synthesis.SynthesisError, match="proof did fail"):
        synthesis.run_yosys(proof, {"adder.v": adder, "reference.v": reference.replace("a + b", "a + b + 1")})


def test_a_cache_written_with_another_toolchain_or_library_is_refused(tmp_path, monkeypatch):
    """The cache file starts with the toolchain record of the pool that wrote it; a pool (and
    the host env's specs, and `prefix-baseline`) refuses a file recorded under another pyosys
    version or library, or written without a record, in one line that names the file."""
    from experiments.prefix.cost_pools import make_pool
    from podracer.config import ConfigError

    spec = find_synthesis()
    path = tmp_path / "cache.jsonl"
    with RewardPool(spec, cache_path=str(path), workers=1) as pool:
        assert isinstance(pool._executor, cf.ThreadPoolExecutor)  # each thread drives a Yosys process
        costs = pool.costs([sklansky(8)], timeout_s=60)
    header, row = path.read_text().splitlines()
    assert json.loads(header) == {"toolchain": spec.record()}
    assert spec.record()["liberty_sha256"] == synthesis.file_sha256(synthesis.LIBERTY)
    with RewardPool(spec, cache_path=str(path), workers=1) as pool:
        np.testing.assert_array_equal(pool.costs([sklansky(8)], timeout_s=60), costs)
        assert pool.metrics()["syntheses"] == 0
    other_version = dict(spec.record(), toolchain="pyosys 0.69")
    other_library = dict(spec.record(), liberty="osu018_stdcells.lib", liberty_sha256="0" * 64)
    for record in (other_version, other_library, None):
        lines = [row] if record is None else [json.dumps({"toolchain": record}), row]
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(CacheMismatch, match=r"^the synthesis cache .*cache.jsonl' was written with") as error:
            RewardPool(spec, cache_path=str(path), workers=1)
        assert "\n" not in str(error.value) and "pyosys 0.70" in str(error.value)
    monkeypatch.setenv("PODRACER_PREFIX_CACHE", str(path))
    with pytest.raises(ValueError, match=r"^\$PODRACER_PREFIX_CACHE: the synthesis cache .* was written with "
                                         r"no recorded toolchain, not with this installation's pyosys"):
        prefix_host_specs("PrefixAdderSynth-8")
    with pytest.raises(ConfigError, match="--cache: the synthesis cache .* was written with"):
        make_pool("synthesis", workers=1, cache_path=str(path))


def test_a_run_directory_records_the_synthesis_toolchain(tmp_path):
    """A synthesis-reward run writes `environment.json` (pyosys version, library file and
    hash, flow) beside its config; resuming it where they differ is a ConfigError. A run
    whose rewards depend on the config alone writes none."""
    from experiments.overrides import apply_overrides
    from experiments.presets import PRESETS
    from experiments.run_dir import ENV_RECORD, check_env_record, prepare_run_dir
    from podracer.config import ConfigError

    config = apply_overrides(PRESETS["dqn-cartpole-sebulba"](), ["--env.id", "PrefixAdderSynth-8"])
    config = dataclasses.replace(config, run_dir=str(tmp_path / "run"))
    prepare_run_dir(config.run_dir, config)
    path = tmp_path / "run" / ENV_RECORD
    record = json.loads(path.read_text())
    assert record == {"synthesis": find_synthesis().record()}
    assert record["synthesis"]["toolchain"].startswith("pyosys ")
    assert record["synthesis"]["liberty"] == "sky130_fd_sc_hd__tt_025C_1v80__prefix.lib"
    check_env_record(config.run_dir, config)  # the same installation resumes it
    path.write_text(json.dumps({"synthesis": dict(record["synthesis"], toolchain="pyosys 0.69")}))
    with pytest.raises(ConfigError, match=r"was trained with .*pyosys 0.69.*: its rewards would differ") as error:
        check_env_record(config.run_dir, config)
    assert "\n" not in str(error.value)
    analytic = dataclasses.replace(config, env=dataclasses.replace(config.env, id="PrefixAdder-8"),
                                   run_dir=str(tmp_path / "analytic"))
    prepare_run_dir(analytic.run_dir, analytic)
    assert not (tmp_path / "analytic" / ENV_RECORD).exists()
    check_env_record(analytic.run_dir, analytic)


def test_the_default_cache_file_is_one_per_toolchain(monkeypatch):
    monkeypatch.delenv("PODRACER_PREFIX_CACHE", raising=False)
    assert host_env.default_cache_path().endswith(f"prefix-synthesis-{find_synthesis().identity}.jsonl")


def test_synthesis_host_env_rewards_are_synthesised_cost_changes(tmp_path):
    spec = find_synthesis()
    pool = RewardPool(spec, executor=cf.ThreadPoolExecutor(2), cache_path=str(tmp_path / "c.jsonl"))
    env = PrefixHostEnv(3, seed=0, bits=8, area_weight=0.5, reset="ripple", pool=pool, horizon=10)
    obs = env.reset()
    before = env.graphs
    action = np.array([np.flatnonzero(m)[k] for k, m in enumerate(obs.action_mask)])
    action[2] = 0  # illegal: no change, reward 0
    env.send(action)
    reward = env.recv().timestep.reward
    ref = synthesis.synthesize(sklansky(8), spec)
    for b in range(2):
        old, new = synthesis.synthesize(before[b], spec), synthesis.synthesize(env.graphs[b], spec)
        expected = 0.5 * (old.area - new.area) / ref.area + 0.5 * (old.delay - new.delay) / ref.delay
        assert reward[b] == pytest.approx(expected, rel=1e-5)
    assert reward[2] == 0.0
    metrics = env.metrics()
    assert metrics["syntheses"] >= 3 and metrics["reward_wait_s"] > 0 and 0 < metrics["cache_hit_rate"] < 1
    pool.close()


def _random_legal_actions(rng, obs):
    return np.array([rng.choice(np.flatnonzero(m)) for m in obs.action_mask])


def test_front_restarts_start_episodes_from_the_front_of_the_designs_costed():
    """With `front_restarts=1` every episode after the first starts from a design on the
    Pareto front of all graphs costed so far (starts and steps), and `front` is that front."""
    n, num_envs, horizon = 8, 3, 2
    env = PrefixHostEnv(num_envs, seed=3, bits=n, horizon=horizon, front_restarts=1.0)
    obs = env.reset()
    seen = [(g, G.area(g), G.delay(g)) for g in env.graphs]
    rng = np.random.default_rng(0)
    restarts = 0
    for _ in range(12):
        env.send(_random_legal_actions(rng, obs))
        step = env.recv().timestep
        if step.truncated.any():
            final = np.asarray(step.final_obs.obs[..., 0] > 0.5)  # the present channel: the graphs
            seen += [(g, G.area(g), G.delay(g)) for g in final]
            front = {d.nodes.tobytes() for d in env.front}
            for g in env.graphs:  # every new episode starts on the front found so far
                assert g.tobytes() in front
                restarts += 1
        else:
            seen += [(g, G.area(g), G.delay(g)) for g in env.graphs]
        obs = step.obs
    assert restarts == num_envs * (12 // horizon)
    points = np.array([[a, d] for _, a, d in seen])
    expected = {(points[i, 0], points[i, 1]) for i in pareto_front(points)}
    assert {(d.area, d.delay) for d in env.front} == expected
    assert env.metrics()["front_size"] == len(expected)
    with pytest.raises(ValueError, match="front_restarts must be in"):
        PrefixHostEnv(1, seed=0, bits=n, front_restarts=1.5)


def test_a_restart_can_start_from_the_design_found_in_the_step_that_ended_the_episode():
    """The graphs of a step join the front before the episodes that step ended restart,
    and the restarts draw from the whole front, not one design of it."""
    env = PrefixHostEnv(1, seed=0, bits=12, horizon=1, reset="ripple", fanout_weight=0.5, front_restarts=1.0)
    obs = env.reset()
    rng = np.random.default_rng(1)
    found_before, fresh_starts, starts = set(), 0, set()
    for _ in range(100):
        env.send(_random_legal_actions(rng, obs))
        step = env.recv().timestep
        found = np.asarray(step.final_obs.obs[0, ..., 0] > 0.5).tobytes()
        start = env.graphs[0].tobytes()
        fresh_starts += start == found and found not in found_before
        found_before.add(found)
        starts.add(start)
        obs = step.obs
    assert fresh_starts >= 2 and len(starts) >= 8  # 4 and 11 (a front of 8 at the end)


def test_without_front_restarts_the_episodes_start_as_they_always_did():
    """`front_restarts=0` draws nothing more from the environment's generator, whatever
    its front holds, and keeps no front: the starts are the mixed draws of before (the
    graphs, then the weights, from one `default_rng(seed)`)."""
    n, num_envs, horizon = 8, 4, 2
    env = PrefixHostEnv(num_envs, seed=5, bits=n, horizon=horizon, front_restarts=0.0)
    env._front = [Design(sklansky(n), 1.0, 1.0)]  # a front it must not draw from
    draws = np.random.default_rng(5)

    def starts():
        graphs = []
        for _ in range(num_envs):
            kind = ("ripple", "sklansky", "random")[draws.integers(3)]
            graphs.append(G.empty_graph(n) if kind == "ripple" else sklansky(n) if kind == "sklansky"
                          else G.random_graph(draws, n, draws.random() * 0.3))
        weights = draws.random(num_envs).astype(np.float32)
        return np.stack(graphs), weights

    obs = env.reset()
    rng = np.random.default_rng(0)
    for t in range(7):
        if t % horizon == 0:
            graphs, weights = starts()
            np.testing.assert_array_equal(env.graphs, graphs)
            np.testing.assert_array_equal(obs.obs[:, 0, 0, -1], weights)  # the weight channel
        env.send(_random_legal_actions(rng, obs))
        obs = env.recv().timestep.obs
    assert PrefixHostEnv(1, seed=0, bits=n).front == [] and "front_size" not in env.metrics()


def test_the_front_holds_the_pool_costs_not_the_analytic_ones():
    """Under synthesis the front is judged by the pool's costs (here a stand-in whose area
    and delay disagree with the analytic model), the starts' costs included."""
    def cost(nodes):
        area, level = float(G.area(nodes)), float(G.delay(nodes))
        return SynthesisResult(100.0 - area, 2.0 * level + area / 10, 0.0)  # more nodes: smaller here

    with RewardPool(evaluate=cost, identity="stand-in", executor=cf.ThreadPoolExecutor(1)) as pool:
        env = PrefixHostEnv(2, seed=0, bits=8, horizon=3, pool=pool, front_restarts=0.5)
        obs = env.reset()
        rng = np.random.default_rng(2)
        for _ in range(10):
            env.send(_random_legal_actions(rng, obs))
            obs = env.recv().timestep.obs
    assert env.front
    for design in env.front:
        assert (design.area, design.delay) == tuple(cost(design.nodes)[:2])


def test_prefix_options_from_env_params_on_both_forms():
    """`env.params` sets a prefix adder's constructor options on the JAX form and the host
    form; the host-only `front_restarts` is refused under Anakin; names, types and ranges are
    checked with errors naming `env.params`."""
    from podracer.config import ConfigError
    from podracer.envs import make_configured_jax_env

    jax_env = make_configured_jax_env(EnvConfig("PrefixAdder-8", params=("reset=ripple", "fanout_weight=0.5")))
    assert jax_env.reset_kind == "ripple" and jax_env.fanout_weight == 0.5
    config = EnvConfig("PrefixAdder-8-w0.5", params=("front_restarts=0.5", "reset=sklansky"))
    host = make_host_env(config, num_envs=2, seed=0)
    assert host.front_restarts == 0.5 and host.spec_env.reset_kind == "sklansky"
    assert host_env_specs(config)[1] == host.action_spec
    np.testing.assert_array_equal(host.reset().obs[..., 0], np.stack([sklansky(8)] * 2))
    cases = [
        (lambda: make_configured_jax_env(EnvConfig("PrefixAdder-8", params=("front_restarts=0.5",))),
         "no option front_restarts (the host form's, under Sebulba)"),
        (lambda: make_host_env(EnvConfig("PrefixAdder-8", params=("colour=red",)), 1, 0), "no option colour"),
        (lambda: host_env_specs(EnvConfig("PrefixAdder-8", params=("max_density=lots",))),
         "max_density must be a finite number"),
        (lambda: make_configured_jax_env(EnvConfig("PrefixAdder-8", params=("fanout_weight=nan",))),
         "fanout_weight must be a finite number"),
        (lambda: host_env_specs(EnvConfig("PrefixAdder-8", params=("front_restarts=2",))),
         "front_restarts must be in [0, 1]"),
        (lambda: make_configured_jax_env(EnvConfig("PrefixAdder-8", params=("reset=anywhere",))),
         "reset must be one of"),
    ]
    for build, message in cases:
        with pytest.raises(ConfigError, match="env.params") as error:
            build()
        assert message in str(error.value), str(error.value)
