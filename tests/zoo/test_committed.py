"""The zoo committed in the repository loads, and each model reproduces its recorded checksum."""

import pytest

from mmspec import zoo
from mmspec.zoo import family_of
from mmspec.zoo.builder import family_module
from mmspec.zoo.growth import unused_threshold


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


def test_every_layer_of_a_committed_deep_model_is_used():
    """A grown target ships only if skipping any one of its layers costs held-out loss (no unused layers)."""
    for name in built_models():
        metrics = zoo.metrics(name)
        ablation = metrics.get("layer_ablation_loss_increase")  # recorded by the deep targets' builds
        if ablation is None:
            continue
        assert "layer_ablation_base_loss" in metrics, f"{name}: the ablation's base loss is not recorded"
        threshold = unused_threshold(metrics["layer_ablation_base_loss"])
        weak = {i: v for i, v in enumerate(ablation) if v < threshold}
        assert not weak, f"{name}: layers {weak} change held-out loss by less than {threshold:.2g} nats"
