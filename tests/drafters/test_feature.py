"""Feature drafters (EAGLE-style, MSD, FLASH) on LLaVA targets: exactness, layouts, save/load, errors."""

import os

import pytest
import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from mmspec import DEFAULT_TREE, SpeculativeGenerator, TreeTemplate
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel, drafter_sequence
from mmspec.training.feature import FeatureTrainConfig, train_feature_drafter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
IMAGE_ID, VOCAB, PER_IMAGE = 250, 256, 4


def llava_hf_like(seed=0, text_layers=2):
    """A tiny random model laid out like llava-hf/llava-1.5-7b-hf: CLIP tower with a CLS token, features
    from layer -2 with the 'default' strategy (CLS dropped), 2-layer GELU projector, Llama LM, image token
    at the end of the vocabulary."""
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(image_size=28, patch_size=14, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, projection_dim=32)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=text_layers,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_ID, vision_feature_layer=-2,
                      vision_feature_select_strategy="default", projector_hidden_act="gelu",
                      image_seq_length=PER_IMAGE)
    return LlavaForConditionalGeneration(cfg).eval()


def batch_inputs(seed=1):
    """Row 0: one image; row 1 (shorter, left padded): two images."""
    g = torch.Generator().manual_seed(seed)
    text = lambda n: torch.randint(3, 200, (n,), generator=g).tolist()  # noqa: E731
    img = [IMAGE_ID] * PER_IMAGE
    rows = [text(3) + img + text(6), img + text(2) + img + text(3)]
    width = max(map(len, rows))
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask, torch.randn(3, 3, 28, 28, generator=g)


@pytest.fixture(scope="module")
def target():
    return llava_hf_like()


@pytest.mark.parametrize("method,tree,compress", [
    ("msd", None, None), ("msd", DEFAULT_TREE, None), ("msd", "dynamic", None), ("eagle", None, None),
    ("flash", None, 1), ("flash", None, 3), ("flash", TreeTemplate.full((2, 2, 1)), 2)])
def test_llava_hf_layout_exact(target, greedy_reference, method, tree, compress):
    ids, mask, pixels = batch_inputs()
    extra = dict(compress_tokens=3, sar_tokens=3) if method == "flash" else {}
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **extra))
    drafter = FeatureDrafter(net, target, tree=tree, compress_to=compress)
    out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, pixel_values=pixels,
                                                         max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, greedy_reference(target, ids, 12, attention_mask=mask, pixel_values=pixels))


@pytest.mark.parametrize("method,tree", [("eagle", None), ("msd", "dynamic")])
def test_int8_weights_stay_exact(target, greedy_reference, method, tree):
    """weights="int8": the layer, fc and LM head through int8 weight-only products (one row's decode steps; the
    prefill and wider products in float); the output is still plain decoding's. "auto" keeps a drafter this small
    in float, and a bad value is refused by name."""
    from mmspec.kernels.int8_linear import int8_available
    if not int8_available("cpu"):
        pytest.skip("no int8 weight-only kernel in this torch")
    ids, mask, pixels = batch_inputs()
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method))
    drafter = FeatureDrafter(net, target, tree=tree, weights="int8")
    assert drafter.weights == "int8" and FeatureDrafter(net, target, weights="auto").weights == "float"
    ref = greedy_reference(target, ids[1:], 12, attention_mask=mask[1:], pixel_values=pixels[1:])
    out = SpeculativeGenerator(target, drafter).generate(ids[1:], attention_mask=mask[1:], pixel_values=pixels[1:],
                                                         max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    with pytest.raises(ValueError, match="weights must be one of"):
        FeatureDrafter(net, target, weights="int4")


def test_image_embeddings_reach_the_msd_drafter(target):
    """The hook-captured projector output equals the target's own image features, placed at the image
    positions in order; the decoupled inputs there are exactly those embeddings."""
    from mmspec.drafters.feature_model import scatter_image_embeds
    from mmspec.training.feature import target_features

    ids, mask, pixels = batch_inputs()
    feats, images, image_mask = target_features(target, {"input_ids": ids, "attention_mask": mask,
                                                         "pixel_values": pixels})
    with torch.no_grad():
        ref = target.model.get_image_features(pixel_values=pixels, vision_feature_layer=-2,
                                              vision_feature_select_strategy="default")
    ref = ref.pooler_output if hasattr(ref, "pooler_output") else ref
    ref = torch.cat(list(ref)) if isinstance(ref, (list, tuple)) else ref.reshape(-1, ref.shape[-1])
    assert torch.allclose(images[image_mask], ref, atol=1e-5)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "msd"))
    x, ok, pos = drafter_sequence(net, target.get_input_embeddings(), ids, mask.bool(), feats, image_mask, images)
    at_image = image_mask[:, 1:] & ok
    assert torch.equal(x[at_image], images[:, 1:][at_image])
    assert scatter_image_embeds(image_mask, ref).shape == (*ids.shape, ref.shape[-1])


def test_flash_compression_shortens_the_drafter_context(target):
    ids, mask, pixels = batch_inputs()
    from mmspec.training.feature import target_features

    feats, images, image_mask = target_features(target, {"input_ids": ids, "attention_mask": mask,
                                                         "pixel_values": pixels})
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "flash", compress_tokens=3, sar_tokens=2))
    full, ok_full, _ = drafter_sequence(FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle")),
                                        target.get_input_embeddings(), ids, mask.bool(), feats, image_mask, images)
    for n in (1, 3):
        x, ok, pos = drafter_sequence(net, target.get_input_embeddings(), ids, mask.bool(), feats, image_mask,
                                      images, compress_to=n)
        # every image's entries become n; row 1 opens with an image whose first placeholder has no entry
        assert ok.sum(1).tolist() == [int(ok_full[0].sum()) - (PER_IMAGE - n),
                                      int(ok_full[1].sum()) - (PER_IMAGE - 1 - n) - (PER_IMAGE - n)]
        assert int((pos == -1).logical_and(ok).sum()) == 3 * n
    with pytest.raises(ValueError, match="queries"):
        net.compress(feats[0, :4], 4)


def test_sar_sampling_is_lossless_in_shape(target):
    """FLASH drafts k tokens per forward with a q per slot; sampling runs and stays within budget."""
    ids, mask, pixels = batch_inputs()
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "flash", compress_tokens=2, sar_tokens=3))
    out = SpeculativeGenerator(target, FeatureDrafter(net, target)).generate(
        ids, attention_mask=mask, pixel_values=pixels, max_new_tokens=10, do_sample=True, temperature=0.8,
        eos_token_id=[], pad_token_id=0, generator=torch.Generator().manual_seed(0))
    assert out.sequences.shape == (2, ids.shape[1] + 10)
    assert out.stats.new_tokens == 20


def test_save_load_and_wrong_target_refused(tmp_path, target):
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "flash", compress_tokens=2, sar_tokens=2))
    net.save_pretrained(tmp_path / "d")
    back = FeatureDraftModel.from_pretrained(tmp_path / "d", target=target)
    for (k, a), (_, b) in zip(net.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    other = llava_hf_like(seed=7)
    with pytest.raises(ValueError, match="another target"):
        FeatureDraftModel.from_pretrained(tmp_path / "d", target=other)
    with pytest.raises(ValueError, match="another target"):
        FeatureDrafter(back, other)


def test_bad_vlm_inputs(target):
    ids, mask, pixels = batch_inputs()
    gen = SpeculativeGenerator(target, FeatureDrafter(
        FeatureDraftModel(FeatureDrafterConfig.for_target(target, "msd")), target))
    with pytest.raises(ValueError, match="pixel_values is missing"):
        gen.generate(ids, attention_mask=mask, max_new_tokens=4)
    with pytest.raises(ValueError, match="number of image tokens"):
        gen.generate(ids, attention_mask=mask, pixel_values=pixels[:2], max_new_tokens=4)
    with pytest.raises(ValueError, match="no image token"):
        gen.generate(torch.tensor([[5, 6, 7]]), pixel_values=pixels[:1], max_new_tokens=4)


def test_training_lowers_the_loss_and_keeps_exactness(target, greedy_reference):
    """A few steps of the two-stage recipe on random rows: validation loss falls, the trained drafter
    stays exact."""
    def batches(step, mix):
        ids, mask, pixels = batch_inputs(seed=100 + step)
        if mix < 0.5:  # text-only rows: drop the placeholders
            keep = ids[0] != IMAGE_ID
            return {"input_ids": ids[:1, keep], "attention_mask": mask[:1, keep], "pixel_values": None}
        return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels}

    val = [batches(999, 1.0)]
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "msd"))
    cfg = FeatureTrainConfig(stage1_steps=5, stage2_steps=25, stage1_budget_s=30, stage2_budget_s=60, batch_size=2,
                             warmup=2, eval_every=10, patience=5, lr=3e-3)
    report = train_feature_drafter(net, target, batches, val, cfg, progress=False)
    hist = report["stage2"]["val_history"]
    assert hist[-1][1] < hist[0][1] or report["stage2"]["best_val_loss"] < hist[0][1]
    ids, mask, pixels = batch_inputs()
    out = SpeculativeGenerator(target, FeatureDrafter(net, target, tree="dynamic", num_tokens=3)).generate(
        ids, attention_mask=mask, pixel_values=pixels, max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, greedy_reference(target, ids, 12, attention_mask=mask, pixel_values=pixels))
