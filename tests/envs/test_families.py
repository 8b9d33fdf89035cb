"""Families of environment ids: what a registration keeps, which ids a pattern takes, and the
names a family may not take (nothing built or compiled)."""

import re

import pytest

from podracer.envs import families
from podracer.envs.families import (
    host_env_families,
    host_family_of,
    jax_env_families,
    jax_family_of,
    register_host_env_family,
    register_jax_env_family,
)
from podracer.plugins import load_plugins


@pytest.fixture(autouse=True)
def fresh_families(monkeypatch):
    """A test's registrations are forgotten after it (the installed plugins load first)."""
    load_plugins()
    monkeypatch.setattr(families, "_JAX_FAMILIES", dict(families._JAX_FAMILIES))
    monkeypatch.setattr(families, "_HOST_FAMILIES", dict(families._HOST_FAMILIES))


def _make(*args):
    return args


def _specs(*args):
    return ("specs", args)


def _record(env_id):
    return {"toolchain": env_id}


def test_a_host_family_keeps_what_it_is_given_and_takes_the_ids_its_pattern_matches_whole():
    family = register_host_env_family(
        "grids", r"Grid-\d+", _make, _specs, examples=["Grid-1"], description="Grid-<n>", record=_record
    )
    assert (family.name, family.make, family.specs, family.examples) == ("grids", _make, _specs, ("Grid-1",))
    assert family.description == "Grid-<n>" and family.record is _record
    assert family.matches("Grid-12") and not family.matches("Grid-x") and not family.matches("MyGrid-1")
    assert not family.matches("Grid-1-v2")  # the whole id, not a prefix
    assert host_family_of("Grid-3") is family and host_family_of("Maze-3") is None
    assert host_env_families()[-1] is family


def test_a_jax_family_keeps_what_it_is_given_and_may_match_by_a_predicate():
    family = register_jax_env_family("mazes", lambda env_id: env_id.startswith("Maze-"), _make, examples=["Maze-1"])
    assert (family.name, family.make, family.examples) == ("mazes", _make, ("Maze-1",))
    assert family.matches("Maze-anything") and not family.matches("Grid-1")
    assert jax_family_of("Maze-3") is family and jax_family_of("Grid-3") is None
    assert jax_env_families()[-1] is family
    compiled = register_jax_env_family("rooms", re.compile(r"Room-[a-z]"), _make)
    assert compiled.matches("Room-a") and not compiled.matches("Room-ab") and compiled.examples == ()


@pytest.mark.parametrize("name", ["auto", "envpool", "gymnasium", "jax"])
def test_a_host_family_may_not_take_a_built_in_backends_name(name):
    with pytest.raises(ValueError, match=f"'{name}' is a built-in host backend"):
        register_host_env_family(name, r"X-\d", _make, _specs, overwrite=True)


def test_a_family_name_is_taken_until_overwritten():
    first = register_host_env_family("grids", r"Grid-\d+", _make, _specs)
    with pytest.raises(ValueError, match="host environment family 'grids' is already registered"):
        register_host_env_family("grids", r"Grid-\d+", _make, _specs)
    assert host_family_of("Grid-1") is first
    second = register_host_env_family("grids", r"Grid-\d+", _make, _specs, overwrite=True)
    assert host_family_of("Grid-1") is second and host_env_families().count(second) == 1

    first = register_jax_env_family("mazes", r"Maze-\d+", _make)
    with pytest.raises(ValueError, match="environment family 'mazes' is already registered"):
        register_jax_env_family("mazes", r"Maze-\d+", _make)
    assert jax_family_of("Maze-1") is first
    second = register_jax_env_family("mazes", r"Maze-\d+", _make, overwrite=True)
    assert jax_family_of("Maze-1") is second
