"""mmspec.loading: one loader for zoo names, checkpoint directories and ready objects, and one ValueError for a
spec it cannot read, wherever mmspec loads (pipeline, VLMGenerator, bench, training)."""

import json

import pytest

from mmspec.drafters import DiffusionLM
from mmspec.loading import load_drafter, load_target, read_record
from mmspec.targets import Target


def test_zoo_name():
    t = load_target("zoo:code-target")
    assert t.zoo == "code-target" and t.name == "zoo:code-target" and t.route == "text"
    assert t.tokenizer is not None and t.tokenizer.eos_token_id is not None
    assert isinstance(load_drafter("zoo:code-deer", t), DiffusionLM)
    assert load_drafter("zoo:code-drafter", t).config.vocab_size == t.model.config.vocab_size
    with pytest.raises(ValueError, match="n-gram model"):
        load_drafter("zoo:code-ngram", t)


def test_checkpoint_directory_and_objects(tmp_path, tiny_pair):
    model, _ = tiny_pair
    model.save_pretrained(tmp_path / "target")
    t = load_target(str(tmp_path / "target"))
    assert type(t.model).__name__ == "LlamaForCausalLM" and t.tokenizer is None and t.zoo is None
    assert t.name == str(tmp_path / "target") and t.route == "text"
    drafter = load_drafter(str(tmp_path / "target"), t)
    assert type(drafter).__name__ == "LlamaForCausalLM"
    given = load_target(model, tokenizer="tok")  # a ready object passes through
    assert given.model is model and given.tokenizer == "tok" and load_drafter(model, given) is model
    assert load_drafter("prompt-lookup", given) == "prompt-lookup"  # named drafters are not loaded


@pytest.mark.parametrize("loader", ["target", "drafter"])
def test_bad_spec_is_one_value_error_naming_it(tmp_path, tiny_pair, loader):
    bad = str(tmp_path / "no" / "such" / "dir")
    with pytest.raises(ValueError, match=f"{loader} '{bad}' is neither 'zoo:<name>' nor a local checkpoint"):
        if loader == "target":
            load_target(bad)
        else:
            load_drafter(bad, Target(tiny_pair[0]))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        load_target(str(empty))


def test_training_record_is_read_and_checked(tmp_path, tiny_pair):
    assert read_record(tmp_path) is None
    (tmp_path / "mmspec.json").write_text(json.dumps({"kind": "diffusion-lm", "route": "vlm"}))
    assert read_record(tmp_path)["kind"] == "diffusion-lm"
    t = Target(tiny_pair[0], name="t")
    with pytest.raises(ValueError, match="trained for vlm targets"):
        load_drafter(str(tmp_path), t)
    (tmp_path / "mmspec.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        read_record(tmp_path)
