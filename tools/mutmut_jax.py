"""A pytest plugin for mutation runs (`mutmut run`, configured in setup.cfg's `[mutmut]`):
JAX traces a jitted function once per process and shape, so while mutmut records which
tests call which function (`MUTANT_UNDER_TEST=stats`), every test after the first to call a
function with the same shapes would reuse the trace and go unrecorded, and a mutant of that
function would never meet it. The plugin clears JAX's in-memory caches before each test of
that recording run (the persistent compilation cache still spares the compiles). Never
loaded by the test suite."""

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        import jax

        jax.clear_caches()
