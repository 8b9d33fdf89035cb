"""The suite's own tools: the tree comparison every test relies on, and the mutation list of
`tools/mutation_check.py` (each break must still apply to the code it names)."""

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.helpers import REPO, assert_trees_equal, tree_allclose


class Pair(NamedTuple):
    a: object
    b: object


def tree(**changes):
    base = {"params": {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)},
            "count": np.int32(4), "key": jax.random.key(0), "none": None}
    return {**base, **changes}


def test_equal_trees_pass_exactly_and_within_tolerance():
    assert_trees_equal(tree(), tree())
    assert_trees_equal({}, {})
    nudged = tree(params={"w": np.ones((2, 3), np.float32) + 1e-7, "b": np.zeros(3, np.float32)})
    tree_allclose(nudged, tree())
    with pytest.raises(AssertionError, match=r"\['params'\]\['w'\]"):
        assert_trees_equal(nudged, tree())  # exact by default
    assert_trees_equal(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))


@pytest.mark.parametrize("actual, expected, message", [
    ({}, tree(), "structures differ"),  # an empty side
    (tree(), {}, "structures differ"),
    (tree(extra=np.zeros(1)), tree(), "structures differ"),  # another key
    (tree(none=np.zeros(1)), tree(), "structures differ"),  # a None that became an array
    (Pair(np.zeros(2), np.ones(2)), {"a": np.zeros(2), "b": np.ones(2)}, "structures differ"),  # node type
    (Pair(np.ones(2), np.zeros(2)), Pair(np.zeros(2), np.ones(2)), r"leaf \.a"),  # fields swapped
    (tree(count=np.ones(4, np.int32)), tree(), r"\['count'\] is int32\(4,\)"),  # broadcasts, shape differs
    (tree(count=np.int64(4)), tree(), r"\['count'\] is int64"),  # dtype
    (tree(key=jax.random.key(1)), tree(), r"\['key'\]"),  # key data
    (tree(key=jax.random.key(0, impl="rbg")), tree(), r"\['key'\] is key<rbg>"),  # key type
], ids=["empty-actual", "empty-expected", "extra-key", "none", "node-type", "swapped", "shape", "dtype",
        "key-data", "key-type"])
def test_differences_are_caught_and_named(actual, expected, message):
    with pytest.raises(AssertionError, match=message):
        assert_trees_equal(actual, expected)
    with pytest.raises(AssertionError, match=message):
        tree_allclose(actual, expected)


def test_device_arrays_compare_like_numpy():
    x = jnp.arange(6.0).reshape(2, 3)
    assert_trees_equal({"x": x}, {"x": np.arange(6.0, dtype=np.float32).reshape(2, 3)})
    with pytest.raises(AssertionError, match="float32"):
        assert_trees_equal({"x": x}, {"x": np.arange(6.0).reshape(2, 3)})  # float64


def test_every_mutation_still_applies_to_the_code():
    """`tools/mutation_check.py`'s breaks must match the code they break (exact text, once),
    and name tests that exist; otherwise the list has rotted."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("mutation_check", os.path.join(REPO, "tools", "mutation_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert len(module.MUTATIONS) >= 10
    names = [m.name for m in module.MUTATIONS]
    assert len(set(names)) == len(names)
    for mutation in module.MUTATIONS:
        assert module.problems(mutation, REPO) == [], mutation.name
