"""The VLM inference API on the zoo's LLaVA target: exactness against HF generate, batching, errors."""

import os

import pytest
import torch

from mmspec import VLMGenerator
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.zoo import load
from mmspec.zoo import vlm_data as vd

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def zoo_target():
    entry = load("vlm-target")
    return entry.model, entry.tokenizer


def test_vlm_generator_matches_hf_generate(zoo_target, greedy_reference):
    model, processor = zoo_target
    torch.manual_seed(0)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(model, "msd"))
    gen = VLMGenerator(model, processor, net, method="msd", tree="dynamic", num_tokens=4)
    scenes = vd.scenes("test", 3)
    # two pictures (2 x 144 visual tokens) do not fit the zoo model's 256 positions: refused, not truncated
    # (multi-picture rows are checked on tiny models in tests/drafters/test_feature.py)
    two = [vd.with_image(vd.with_image(scenes[1].questions[0].prompt))]
    with pytest.raises(ValueError, match="longer than the model supports"):
        gen.generate(images=[[scenes[1].image(), scenes[2].image()]], prompts=two, max_new_tokens=16)
    prompts = [vd.with_image(vd.CAPTION_PROMPT), vd.with_image(scenes[1].questions[0].prompt)]
    images = [scenes[0].image(), scenes[1].image()]  # rows of different lengths: row 0 left padded
    out = gen.generate(images=images, prompts=prompts, max_new_tokens=16)
    inputs = gen.prepare(images, prompts)
    ref = greedy_reference(model, max_new_tokens=16, eos_token_id=processor.tokenizer.eos_token_id,
                           pad_token_id=processor.tokenizer.pad_token_id, **inputs)
    width = inputs["input_ids"].shape[1]
    tok = processor.tokenizer
    for row in range(2):
        want = tok.decode(ref[row, width:], skip_special_tokens=True).strip()
        assert out.texts[row] == want
    assert out.stats.new_tokens > 0


def test_vlm_generator_errors(zoo_target):
    model, processor = zoo_target
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(model, "flash", compress_tokens=2, sar_tokens=2))
    with pytest.raises(ValueError, match="trained as 'flash'"):
        VLMGenerator(model, processor, net, method="msd")
    gen = VLMGenerator(model, processor, net, method="flash")
    img = vd.scenes("test", 1)[0].image()
    with pytest.raises(ValueError, match="placeholder"):
        gen.generate(images=[img], prompts=["Caption:"], max_new_tokens=4)
    with pytest.raises(ValueError, match="image entries"):
        gen.generate(images=[img, img], prompts=[vd.with_image("Caption:")], max_new_tokens=4)
    with pytest.raises(ValueError, match="non-empty"):
        gen.generate(images=[None], prompts=[""], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate(images=[img], prompts=[vd.with_image("Caption:")], max_new_tokens=0)
    with pytest.raises(ValueError, match="unknown VLM method"):
        VLMGenerator(model, processor, net, method="medusa")


def test_train_cli_writes_a_loadable_drafter(tmp_path, zoo_target, greedy_reference):
    from mmspec.cli import main
    from mmspec.drafters.feature_model import FeatureDraftModel

    out = tmp_path / "flash"
    rc = main(["train", "flash", "--scenes", "16", "--stage1-steps", "2", "--stage2-steps", "3", "--batch-size", "4",
               "--compress-tokens", "2", "--sar-tokens", "2", "--out", str(out)])
    assert rc == 0
    model, processor = zoo_target
    net = FeatureDraftModel.from_pretrained(out, target=model)
    assert net.config.method == "flash" and net.config.compress_tokens == 2
    gen = VLMGenerator.from_pretrained("zoo:vlm-target", str(out), method="flash", compress_to=1)
    scene = vd.scenes("test", 1)[0]
    res = gen.generate(images=[scene.image()], prompts=[vd.with_image(vd.CAPTION_PROMPT)], max_new_tokens=12)
    inputs = gen.prepare([scene.image()], [vd.with_image(vd.CAPTION_PROMPT)])
    ref = greedy_reference(model, max_new_tokens=12, eos_token_id=processor.tokenizer.eos_token_id,
                           pad_token_id=processor.tokenizer.pad_token_id, **inputs)
    want = processor.tokenizer.decode(ref[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    assert res.texts == [want]


def test_jsonl_training_rows(tmp_path, zoo_target):
    """A user's .jsonl (image path, prompt with the placeholder, response) becomes right-padded training rows:
    with pictures when multimodal, without the placeholder otherwise."""
    import json

    from mmspec.training.feature import jsonl_batches

    model, processor = zoo_target
    rows = []
    for i, sc in enumerate(vd.scenes("train", 3)):
        path = tmp_path / f"{i}.png"
        sc.image().save(path)
        rows.append({"image": str(path), "prompt": vd.with_image(vd.CAPTION_PROMPT), "response": " " + sc.caption})
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    batches = jsonl_batches(str(data), processor, batch_size=4, seed=0)
    image_id = model.config.image_token_id
    mm = batches(0, 1.0)
    per_image = model.config.image_seq_length
    assert mm["pixel_values"].shape[0] == 4 and (mm["input_ids"] == image_id).sum() == 4 * per_image
    assert mm["attention_mask"][:, 0].all()  # right padding: every row starts with a real token
    text = batches(0, 0.0)
    assert text["pixel_values"] is None and not (text["input_ids"] == image_id).any()
    from mmspec.training.feature import target_features

    feats, images, mask = target_features(model, mm)
    assert feats.shape[:2] == mm["input_ids"].shape and images is not None and int(mask.sum()) == 4 * per_image
