"""Test setup: 4 fake CPU devices, set before JAX initialises its backends, and a
persistent compilation cache shared by the tests (and their subprocesses) of one session,
so that the many small runs of identical programs compile once; and the `variant` fixture
of the pure-function tests; and a marker per folder. Other shared helpers are in tests/support/."""

import atexit
import os
import shutil
import tempfile

from jaxlib.version import __version__ as jaxlib_version  # no backend starts: XLA_FLAGS is read later

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="podracer-jax-cache-")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Most of the suite's time is XLA:CPU compiling many small programs that then run briefly:
# LLVM's cheapest code generation compiles them ~40% faster (and runs them a little slower).
# XLA:CPU's older (pre-MLIR) fusion emitters and one LLVM module per program, instead of a
# split for parallel codegen, compile them ~30% faster again and run them no slower
# (measured on jaxlib 0.10.2). XLA aborts on a flag it does not know, hence the version checks:
# from jaxlib 0.11 on there are no older emitters to choose (it knows no
# `xla_cpu_use_fusion_emitters`); 0.11 and 0.12 keep the codegen split setting.
# No fast-math either way, but rounding can differ in the last bits; subprocesses inherit the flags.
_FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
_JAXLIB = tuple(int(part) for part in jaxlib_version.split(".")[:2])
if _JAXLIB == (0, 10):
    _FAST_COMPILE += ("--xla_cpu_use_fusion_emitters=false",)
if (0, 10) <= _JAXLIB <= (0, 12):
    _FAST_COMPILE += ("--xla_cpu_parallel_codegen_split_count=1",)
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")] + [f for f in _FAST_COMPILE if f.split("=")[0] not in os.environ.get("XLA_FLAGS", "")]
).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)


# `_FAST_COMPILE` with LLVM's optimisation level raised to 1, for the tests whose time goes
# into running rather than compiling (`@pytest.mark.optimized`: long learning runs, about 2x
# faster with it; full optimisation runs no faster and compiles slower).
_OPTIMIZED = {"xla_backend_optimization_level": 1, "xla_llvm_disable_expensive_passes": True}


@pytest.fixture(autouse=True)
def _optimized_codegen(request, monkeypatch):
    """Under `@pytest.mark.optimized`, the test's programs compile with LLVM's optimising
    code generation (as `jax.jit(..., compiler_options=...)` would ask for each): XLA flags
    are fixed per process, the compile options of each compilation are not. Only in this
    process: subprocesses inherit `_FAST_COMPILE`. On a JAX without the hook this changes
    nothing but the test's speed."""
    if request.node.get_closest_marker("optimized") is None:
        return
    try:
        from jax._src.interpreters import pxla
    except ImportError:
        return
    create = getattr(pxla, "create_compile_options", None)
    if create is None:
        return

    def create_optimized(computation, tuple_args, to_inputs, to_outputs, backend, devices, compiler_options):
        return create(computation, tuple_args, to_inputs, to_outputs, backend, devices, {**_OPTIMIZED, **compiler_options})

    monkeypatch.setattr(pxla, "create_compile_options", create_optimized)


@pytest.fixture(params=["jit", "nojit"])
def variant(request):
    """Run a test of a pure function with and without jit (chex.variants' idea,
    pytest-native): `variant(fn)` is `jax.jit(fn)` or `fn` itself."""
    return jax.jit if request.param == "jit" else (lambda f: f)


# The folders of tests/, each a marker (`pytest -m ops`, as `pytest tests/ops`): the library's
# packages, the runners, the application layer, and the cross-cutting suites.
FOLDERS = ("agents", "anakin", "core", "envs", "experiments", "integration", "networks", "ops", "replay",
           "runner", "sebulba", "support")
_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    """Put the `costly` tests in the slow tier, and mark each test with its top folder under
    tests/ (FOLDERS). Under pytest-xdist, hand out the slow tests first (longest first packs
    two workers best: the short tests fill in at the end instead of one long test running
    alone), and, as every worker shares the machine's cores with the others and a test takes
    up to that many times longer, stretch each test's timeout (a guard against hangs, never a
    speed check) by the number of workers."""
    for item in items:
        if item.get_closest_marker("costly") is not None:
            if item.get_closest_marker("slow") is not None:  # a parameter slow for a reason of its own
                item.own_markers[:] = [mark for mark in item.own_markers if mark.name != "costly"]
            else:
                item.add_marker(pytest.mark.slow)
        folder = os.path.relpath(str(item.path), _TESTS).split(os.sep)[0]
        if folder in FOLDERS:
            item.add_marker(getattr(pytest.mark, folder))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the file order within each tier
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker is not None and marker.args else default
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(seconds * workers), append=False)
