"""VLM family of the zoo: procedural scenes, and a MICRO build (LLaVA target + text-only drafter) that must
load back, reproduce its recorded checksums and run through the speculative engine exactly."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from mmspec import SpeculativeGenerator  # noqa: E402
from mmspec.drafters import AutoregressiveDrafter  # noqa: E402
from mmspec.zoo import build, load, vlm  # noqa: E402
from mmspec.zoo import vlm_data as vd  # noqa: E402
from mmspec.zoo.common import read_json  # noqa: E402


def test_scenes_are_deterministic_and_consistent():
    a, b = vd.scenes("val", 6), vd.scenes("val", 6)
    for x, y in zip(a, b):
        assert x.caption == y.caption and x.image().tobytes() == y.image().tobytes()
    for sc in vd.scenes("train", 40):
        assert 1 <= len(sc.objects) <= 3
        assert len({o.shape for o in sc.objects}) == len(sc.objects)  # every question has one answer
        assert len({o.colour for o in sc.objects}) == len(sc.objects)
        kinds = {q.kind for q in sc.questions}
        assert kinds == set(vd.QUESTION_TYPES)
        count = next(q for q in sc.questions if q.kind == "count")
        assert count.answer == vd.NUMBERS[len(sc.objects)]
        assert sc.image().size == (vd.IMAGE_SIZE, vd.IMAGE_SIZE)
    assert len(vd.SHAPES) >= 5 and len(vd.COLOURS) >= 6


def test_splits_are_disjoint():
    assert vd.split_of_seed(vd.split_seed("test", 3)) == "test"
    spans = sorted(vd.SPLITS.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    with pytest.raises(IndexError):
        vd.split_seed("val", 10**9)


def test_object_pixels_carry_its_colour():
    sc = vd.make_scene(vd.split_seed("test", 11))
    img = vlm.pixel_tensor([sc.image()])[0].permute(1, 2, 0).add(1).mul(127.5)  # back to 0..255, HWC
    for o in sc.objects:
        centre = img[int(o.cy), int(o.cx)]
        assert (centre - torch.tensor(vd.COLOURS[o.colour], dtype=torch.float)).abs().max() < 40


def test_processor_ids_match_the_encoder(tmp_path):
    from mmspec.zoo.code_data import ensure_tokenizer

    tok = ensure_tokenizer(tmp_path, micro=True)
    proc = vlm.make_processor(tok)
    enc = vlm.Encoder(tok, vlm.num_image_tokens())
    sc = vd.make_scene(vd.split_seed("val", 2))
    q = sc.questions[0]
    ids = proc(images=[sc.image()], text=[vd.with_image(q.prompt)], return_tensors="pt")
    assert ids["input_ids"][0].tolist() == enc.prompt_ids(q)
    torch.testing.assert_close(ids["pixel_values"], vlm.pixel_tensor([sc.image()]))


def test_micro_build_loads_checksums_and_runs_exactly(tmp_path):
    metrics = build("vlm", micro=True, home=tmp_path, progress=False)
    assert set(metrics) == set(vlm.NAMES)
    for name in vlm.BASE_NAMES:
        m = read_json(tmp_path / name / "metrics.json")
        for key in ("accuracy", "accuracy_by_type", "held_out_loss", "caption_word_accuracy", "train"):
            assert key in m, (name, key)
        entry = load(name, home=tmp_path)
        got, rec = vlm.checksum(entry), entry.config["checksum"]
        assert got["sum"] == pytest.approx(rec["sum"], rel=1e-4, abs=1e-3)
        assert got["first"] == pytest.approx(rec["first"], rel=1e-4, abs=1e-4)
    assert "vision" in read_json(tmp_path / "vlm-target" / "metrics.json")["train"]

    target, draft = load("vlm-target", home=tmp_path), load("vlm-drafter", home=tmp_path)
    scenes = vd.scenes("test", 2)
    inputs = target.tokenizer(images=[sc.image() for sc in scenes],
                              text=[vd.with_image(sc.questions[0].prompt) for sc in scenes], return_tensors="pt")
    ref = target.model.generate(**inputs, do_sample=False, max_new_tokens=10, eos_token_id=None, pad_token_id=0)
    out = SpeculativeGenerator(target.model, AutoregressiveDrafter(draft.model, num_tokens=3)).generate(
        inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
    assert torch.equal(out.sequences, ref)

    # the feature drafters: trained against this target, saved, reloaded, exact on the suite's methods
    from mmspec.eval.vlm_suite import feature_factories

    for name in ("vlm-eagle", "vlm-msd", "vlm-flash"):
        m = read_json(tmp_path / name / "metrics.json")
        assert m["stage1"]["steps"] > 0 and m["stage2"]["steps"] > 0
        assert all(0.0 <= a <= 1.0 for accs in m["slot_accuracy"].values() for a in accs)
    factories = feature_factories(tmp_path)
    for method in ("eagle-dynamic", "msd-chain", "msd-dynamic", "flash-1"):
        out = SpeculativeGenerator(target.model, factories[method]()).generate(
            inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
        assert torch.equal(out.sequences, ref), method
