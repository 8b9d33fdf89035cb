"""Reward CPUs (Raptor, PrefixRL): a pool of synthesis workers with a persistent cache.

Actors `submit` graphs and carry on; each request is a `concurrent.futures.Future` of
`(area, delay)`. `wait` collects a batch of them with a deadline (a bounded wait: an actor
never blocks longer, it gets `RewardTimeout`). The pool takes any `Executor`: by default,
for synthesis, one thread per CPU of this host, each driving a Yosys process of its own
(Yosys is not thread-safe, and an error ends its process, never the caller's); a Dask or
Ray executor turns remote machines into reward CPUs. Under several processes, each process
(host) builds its own pool.

Costs are cached by graph, toolchain, library and flow (`SynthesisSpec.identity`), in memory
and in an append-only JSON-lines file: a resumed run, or any later run with the same cache
file, never synthesises a graph twice. A graph already being synthesised is not submitted
again. The file's first row, `{"toolchain": ...}`, records what its costs were computed
with (`SynthesisSpec.record`: pyosys version, library file and SHA-256, flow); a pool
refuses a cache file written under another record (`CacheMismatch`), so every machine that
shares a cache computes the same area and delay. Each cost row also holds the graph
(`grid`, as `designs.jsonl` writes it), so a fresh cache file is the record of every
distinct graph a run synthesised (`cache_designs`): the honest count of its syntheses.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from experiments.prefix.front import Design, grid_rows, nodes_from_rows
from experiments.prefix.graph import area, delay
from experiments.prefix.synthesis import SynthesisResult, SynthesisSpec, synthesize

Evaluate = Callable[[np.ndarray], SynthesisResult]


class RewardTimeout(TimeoutError):
    """Synthesis results did not arrive within the bounded wait."""


class CacheMismatch(ValueError):
    """A cache file was written with another toolchain, cell library or flow (or with none
    recorded); the message names the file and both records, on one line."""


def graph_key(nodes: np.ndarray, identity: str) -> str:
    """Cache key of a graph under a flow and library: its size and packed grid, hashed."""
    nodes = np.asarray(nodes, bool)
    packed = np.packbits(nodes.ravel()).tobytes()
    return hashlib.sha256(f"{nodes.shape[0]}|{identity}|".encode() + packed).hexdigest()[:32]


def analytic_cost(nodes: np.ndarray, fanout_weight: float = 0.0) -> SynthesisResult:
    """The analytic cost as a pool evaluation: area = node count, delay = level (or the
    fanout-aware arrival time). Identity for caches: `f"analytic-{fanout_weight:g}"`."""
    return SynthesisResult(float(area(nodes)), float(delay(nodes, fanout_weight)), 0.0)


def default_executor(workers: int | None = None) -> cf.Executor:
    """A process pool over this host's CPUs, for an `evaluate` function. Its processes are
    spawned (not forked: forking a process that runs JAX's threads can deadlock)."""
    return cf.ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1,
                                  mp_context=multiprocessing.get_context("spawn"))


def synthesis_executor(workers: int | None = None) -> cf.Executor:
    """Threads over this host's CPUs, for synthesis: each thread drives a Yosys process of
    its own (`synthesis.yosys_process`), so the syntheses run in parallel processes."""
    return cf.ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="synthesis")


def describe_record(record: Mapping[str, str] | None) -> str:
    """A toolchain record on one line, e.g. `pyosys 0.70, sky130_...lib (sha256 51cbc85c2bfa), flow '...'`."""
    if not record:
        return "no recorded toolchain"
    if "liberty" not in record:
        return ", ".join(f"{key} {value}" for key, value in sorted(record.items()))
    return (f"{record.get('toolchain')}, {record.get('liberty')} (sha256 {str(record.get('liberty_sha256'))[:12]}), "
            f"flow {record.get('flow')!r}")


def cache_record(path: str) -> dict[str, str] | None:
    """The toolchain record a cache file starts with (`{"toolchain": ...}`), or None when it
    has none. A file that is empty, or holds only a header cut by a crash, gives `{}`."""
    with open(path, errors="replace") as f:
        first = f.readline()
        rest = f.read(1)
    if not first.strip():
        return {}
    try:
        row = json.loads(first)
    except ValueError:
        return {} if not rest and not first.endswith("\n") else None
    record = row.get("toolchain") if isinstance(row, dict) else None
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else None


def cache_designs(path: str, identity: str) -> list[Design]:
    """Every graph a cache file holds with its cost under the flow and library `identity`,
    in the order synthesised. Rows of another identity (their key is not this graph's key
    under `identity`), rows written before graphs were stored, and a row cut by a crash
    or damaged (even into bytes that are not UTF-8) are skipped."""
    designs = []
    with open(path, errors="replace") as f:  # a damaged byte spoils its line only
        for line in f:
            try:
                row = json.loads(line)
                nodes = nodes_from_rows(row["grid"])
                cost = float(row["area"]), float(row["delay"])
                key = row["key"]
            except (ValueError, KeyError, TypeError):
                continue
            if key == graph_key(nodes, identity):
                designs.append(Design(nodes, *cost))
    return designs


def check_cache_file(path: str, record: Mapping[str, str] | None = None) -> None:
    """Check a cache file before any synthesis is spent.

    Args:
        path: the cache file; created (with its directory) if missing.
        record: what this installation computes costs with (`SynthesisSpec.record`); None:
            the file's record is not checked.

    Raises:
        ValueError naming the path when the file cannot be read and appended to;
        CacheMismatch when it records another toolchain, library or flow than `record`
        (or none, while it holds costs).
    """
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a"):
            pass
        found = cache_record(path)
    except OSError as error:
        raise ValueError(f"the synthesis cache {path!r} cannot be read and appended to: "
                         f"{error.strerror or error}") from None
    if record is not None and found != {} and found != dict(record):
        raise CacheMismatch(f"the synthesis cache {path!r} was written with {describe_record(found)}, not with "
                            f"this installation's {describe_record(record)}; give another cache file")


class RewardPool:
    """Costs of prefix graphs from workers, cached.

    spec:       a `SynthesisSpec` (synthesis by `synthesize` in the workers), or
    evaluate:   any picklable `nodes -> SynthesisResult` with its own `identity` string
                (e.g. an analytic cost, or a stand-in in tests).
    executor:   where evaluations run; None: `synthesis_executor(workers)` for a spec
                (threads, each driving a Yosys process of its own), `default_executor(workers)`
                for an evaluate function (owned, shut down by `close`). Results are cached
                in the submitting process. A script that uses a process pool needs
                Python's `if __name__ == "__main__":` guard (spawned workers import the
                main module); a thread pool does not.
    cache_path: the JSON-lines cache file (created if missing; None: memory only); one
                written under another toolchain record is refused (`CacheMismatch`).
    record:     an evaluate function's toolchain record for the cache file (default
                `{"identity": identity}`); a spec's is `spec.record()`.
    """

    def __init__(self, spec: SynthesisSpec | None = None, *, evaluate: Evaluate | None = None,
                 identity: str | None = None, executor: cf.Executor | None = None,
                 cache_path: str | None = None, workers: int | None = None,
                 record: Mapping[str, str] | None = None) -> None:
        if (spec is None) == (evaluate is None):
            raise ValueError("give either a SynthesisSpec or an evaluate function (with its identity)")
        if spec is not None:
            evaluate, identity, record = functools.partial(synthesize, spec=spec), spec.identity, spec.record()
        if not identity:
            raise ValueError("an evaluate function needs an identity string for the cache")
        self.identity = identity
        self.record = dict(record or {"identity": identity})
        self._evaluate = evaluate
        self._owned = executor is None
        if executor is None:
            executor = synthesis_executor(workers) if spec is not None else default_executor(workers)
        self._executor = executor
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, float]] = {}
        self._inflight: dict[str, cf.Future] = {}
        self._cache_path = cache_path
        self._requests = self._hits = self._syntheses = 0
        self._synthesis_s = self._wait_s = 0.0
        self._first_submit: float | None = None
        self._last_done: float | None = None
        if cache_path is not None:
            self._load(cache_path)

    # --- cache ------------------------------------------------------------------------
    def _load(self, path: str) -> None:
        check_cache_file(path, self.record)
        if cache_record(path) == {}:  # a new file (or a header cut by a crash): record the toolchain
            with open(path, "a" if os.path.getsize(path) == 0 else "w") as f:
                f.write(json.dumps({"toolchain": self.record}) + "\n")
        with open(path, errors="replace") as f:  # a damaged byte spoils its line only
            text = f.read()
        for line in text.splitlines():
            try:
                row = json.loads(line)
                self._cache[row["key"]] = (float(row["area"]), float(row["delay"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash mid-write: that graph is synthesised again
        if text and not text.endswith("\n"):  # end the cut line, so new rows start their own
            with open(path, "a") as f:
                f.write("\n")

    def _store(self, key: str, nodes: np.ndarray, result: SynthesisResult) -> None:
        with self._lock:
            if self._cache_path is not None:  # first: a failed write leaves the graph uncached
                with open(self._cache_path, "a") as f:
                    row = {"key": key, "area": result.area, "delay": result.delay, "grid": grid_rows(nodes)}
                    f.write(json.dumps(row) + "\n")
            self._cache[key] = (result.area, result.delay)
            self._inflight.pop(key, None)
            self._syntheses += 1
            self._synthesis_s += result.seconds
            self._last_done = time.perf_counter()

    def cached(self, nodes: np.ndarray) -> tuple[float, float] | None:
        return self._cache.get(graph_key(nodes, self.identity))

    def __len__(self) -> int:
        return len(self._cache)

    # --- requests ---------------------------------------------------------------------
    def submit(self, nodes: np.ndarray) -> cf.Future:
        """A future of the graph's `(area, delay)`; never blocks."""
        key = graph_key(nodes, self.identity)
        with self._lock:
            self._requests += 1
            if key in self._cache:
                self._hits += 1
                future: cf.Future = cf.Future()
                future.set_result(self._cache[key])
                return future
            if key in self._inflight:
                self._hits += 1  # a duplicate request costs no synthesis
                return self._inflight[key]
            if self._first_submit is None:
                self._first_submit = time.perf_counter()
            result = cf.Future()
            self._inflight[key] = result
        nodes = np.array(nodes, bool)
        work = self._executor.submit(self._evaluate, nodes)

        def done(work: cf.Future) -> None:
            if work.cancelled():  # the executor shut down first: its waiters fail now, not at their timeout
                with self._lock:
                    self._inflight.pop(key, None)
                result.cancel()
                result.set_running_or_notify_cancel()  # what `cf.wait` counts as done
                return
            error = work.exception()
            if error is not None:
                with self._lock:
                    self._inflight.pop(key, None)
                result.set_exception(error)
                return
            try:
                self._store(key, nodes, work.result())
            except Exception as store_error:  # e.g. the cache file became unwritable: fail, not hang
                with self._lock:
                    self._inflight.pop(key, None)
                result.set_exception(store_error)
                return
            result.set_result(self._cache[key])

        work.add_done_callback(done)
        return result

    def wait(self, futures: Sequence[cf.Future], timeout_s: float) -> np.ndarray:
        """`float64 [len(futures), 2]` (area, delay); waits at most `timeout_s` in all and
        raises RewardTimeout if some are still missing then (errors are re-raised)."""
        start = time.perf_counter()
        _, pending = cf.wait(futures, timeout=timeout_s)
        with self._lock:
            self._wait_s += time.perf_counter() - start
        if pending:
            raise RewardTimeout(f"{len(pending)} of {len(futures)} synthesis results did not arrive within "
                                f"{timeout_s:g} s; more reward workers or a longer reward timeout are needed")
        return np.array([f.result() for f in futures], np.float64).reshape(len(futures), 2)

    def costs(self, graphs: Sequence[np.ndarray], timeout_s: float = 600.0) -> np.ndarray:
        """Submit and wait: `[len(graphs), 2]` (area, delay)."""
        return self.wait([self.submit(g) for g in graphs], timeout_s)

    def metrics(self) -> dict[str, float]:
        """Syntheses run and per second (since the first one was submitted), mean seconds
        per synthesis, requests, cache hit rate, seconds spent waiting in `wait`."""
        with self._lock:
            span = (self._last_done - self._first_submit) if self._last_done and self._first_submit else 0.0
            return {
                "syntheses": self._syntheses,
                "syntheses_per_s": self._syntheses / span if span > 0 else 0.0,
                "synthesis_s_mean": self._synthesis_s / self._syntheses if self._syntheses else 0.0,
                "reward_requests": self._requests,
                "cache_hit_rate": self._hits / self._requests if self._requests else 0.0,
                "reward_wait_s": self._wait_s,
                "cached_graphs": len(self._cache),
            }

    def close(self) -> None:
        """Shut down the executor if the pool made it (pending work is cancelled)."""
        if self._owned:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RewardPool:  # noqa: PYI034 (no subclasses)
        return self

    def __exit__(self, *exc) -> None:
        self.close()
