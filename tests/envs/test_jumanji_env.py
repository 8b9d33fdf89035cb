"""The Jumanji suite's ids and adapter, against Jumanji's own registry (nothing compiled)."""

import pytest

jumanji = pytest.importorskip("jumanji", reason="Jumanji is not installed: pip install 'podracer[jumanji]'")

from podracer.envs import jumanji_env  # noqa: E402
from podracer.envs.wrappers import TimeStepEnv  # noqa: E402


def test_suite_ids_are_jumanjis_registry_with_the_prefix_in_order():
    expected = tuple("jumanji/" + name for name in sorted(jumanji.registered_environments()))
    assert jumanji_env.suite_ids() == expected and "jumanji/Snake-v1" in expected


def test_an_id_is_jumanjis_environment_under_its_own_name_and_time_limit():
    env = jumanji_env.make_suite_env("jumanji/Snake-v1")
    assert isinstance(env, TimeStepEnv) and env.name == "jumanji/Snake-v1"
    assert type(env.env).__name__ == "Snake" and env.max_episode_steps(None) == env.env.time_limit == 4000


def test_an_unknown_id_is_a_key_error_naming_it():
    with pytest.raises(KeyError, match="Snake-v9"):
        jumanji_env.make_suite_env("jumanji/Snake-v9")
