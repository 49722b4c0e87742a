"""The zoo committed in the repository loads, and each model reproduces its recorded checksum."""

import pytest

from mmspec import zoo
from mmspec.zoo import family_of
from mmspec.zoo.builder import family_module


def built_models():
    home = zoo.zoo_home()
    return [name for name in zoo.available() if (home / name / "zoo.json").exists()]


def test_the_zoo_is_committed():
    names = built_models()
    assert "code-target" in names and "code-drafter" in names, f"zoo at {zoo.zoo_home()} holds {names}"


@pytest.mark.parametrize("name", built_models())
def test_committed_model_matches_its_checksum(name):
    entry = zoo.load(name)
    assert entry.config["micro"] is False
    recorded = entry.config["checksum"]
    got = family_module(family_of(name)).checksum(entry)
    assert got["sum"] == pytest.approx(recorded["sum"], rel=1e-4, abs=1e-3)
    assert got["first"] == pytest.approx(recorded["first"], rel=1e-4, abs=1e-4)
    metrics = zoo.metrics(name)
    assert metrics, name
