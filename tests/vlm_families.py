"""Tiny random-weight targets of several VLM families, built from their transformers config classes, with
sharpened weights (:func:`tests.tiny_models.sharpen`) and a small rope base so that positions matter."""

import torch

from tests.tiny_models import sharpen

IMAGE = 5  # image placeholder id in every tiny family but LLaVA-1.5
LLAVA_IMAGE = 3
TEXT = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, eos_token_id=2, bos_token_id=1)


def tiny_llava(seed=0):
    """LLaVA-1.5: 16x16 images in 8x8 patches, features without CLS ("default" strategy): 4 placeholders
    (``LLAVA_IMAGE``) per image."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(seed)
    cfg = LlavaConfig(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, image_size=16, patch_size=8, projection_dim=32,
                                         model_type="clip_vision_model"),
                      text_config=dict(TEXT, model_type="llama",
                                       rope_parameters=dict(rope_type="default", rope_theta=100.0)),
                      image_token_id=LLAVA_IMAGE, vision_feature_select_strategy="default", vision_feature_layer=-1)
    return sharpen(LlavaForConditionalGeneration(cfg), seed)


def llava_batch(batch, seed=0):
    """``(ids, pixels)``: ``batch`` rows of one image's 4 placeholders then 6 text tokens, and their images."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(4, 96, (batch, 6), generator=g)
    ids = torch.cat([torch.full((batch, 4), LLAVA_IMAGE), text], 1)
    return ids, torch.randn(batch, 3, 16, 16, generator=g)


def tiny_qwen_vl(version="2", seed=0, vocab_size=96, ids=(IMAGE, 8, 6, 7)):
    """Qwen2-VL (``version="2"``) or Qwen2.5-VL (``"2.5"``): 4x4-pixel patches merged 2x2, so a 16x16 image
    (grid 1x4x4) is 4 placeholders. ``ids``: image, video, vision-start and vision-end token ids."""
    torch.manual_seed(seed)
    rope = dict(rope_type="default", rope_theta=100.0, mrope_section=[2, 3, 3])
    ids = dict(zip(("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"), ids))
    if version == "2":
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration as cls

        cfg = Qwen2VLConfig(text_config=dict(TEXT, vocab_size=vocab_size, rope_parameters=rope), **ids,
                            vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=4,
                                               spatial_merge_size=2, temporal_patch_size=2))
    else:
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration as cls

        cfg = Qwen2_5_VLConfig(text_config=dict(TEXT, vocab_size=vocab_size, rope_parameters=rope), **ids,
                               vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                                  patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                                                  out_hidden_size=64, window_size=16, fullatt_block_indexes=[1]))
    return sharpen(cls(cfg), seed)


def qwen_batch(seed=1):
    """Two left-padded rows: a 16x16 image (4 placeholders) then text, and text then a 16x32 image (8)."""
    g = torch.Generator().manual_seed(seed)
    row0 = [10, 11, 6] + [IMAGE] * 4 + [7, 12, 13, 14]
    row1 = [10, 30, 31, 6] + [IMAGE] * 8 + [7, 20, 21, 22, 23]
    width = max(len(row0), len(row1))
    row0 = [0] * (width - len(row0)) + row0
    ids = torch.tensor([row0, row1])
    mask = (torch.arange(width)[None] >= torch.tensor([[width - 11], [0]])).long()
    grid = torch.tensor([[1, 4, 4], [1, 4, 8]])
    pixels = torch.randn(16 + 32, 3 * 2 * 4 * 4, generator=g)
    return ids, mask, dict(pixel_values=pixels, image_grid_thw=grid, mm_token_type_ids=(ids == IMAGE).int())


SIGLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=16,
              patch_size=4)
GEMMA = dict(TEXT, head_dim=16, tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=100.0))


def tiny_paligemma(seed=0, vocab_size=96, image_token=IMAGE):
    """PaliGemma: 16x16 images in 4x4 patches, 16 placeholders each; the image + prompt prefix is
    bidirectional (``token_type_ids`` 0)."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    torch.manual_seed(seed)
    cfg = PaliGemmaConfig(vision_config=dict(SIGLIP, model_type="siglip_vision_model"),
                          text_config=dict(GEMMA, model_type="gemma", vocab_size=vocab_size),
                          image_token_index=image_token,
                          projection_dim=64, hidden_size=64, tie_word_embeddings=False)
    return sharpen(PaliGemmaForConditionalGeneration(cfg), seed)


def tiny_gemma3(seed=0, sliding_window=None):
    """Gemma3: a 16x16 image's 4x4 patches pooled to ``mm_tokens_per_image`` = 4 placeholders, each image's
    placeholders one bidirectional block (``token_type_ids`` 1). All layers full attention, or with
    ``sliding_window`` the real checkpoints' mix (sliding layers, then a full one)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    torch.manual_seed(seed)
    rope = dict(rope_type="default", rope_theta=100.0)
    n = TEXT["num_hidden_layers"]
    layer_types = (["full_attention"] * n if sliding_window is None
                   else ["sliding_attention"] * (n - 1) + ["full_attention"])
    text = dict(GEMMA, layer_types=layer_types, query_pre_attn_scalar=16,
                sliding_window=sliding_window or 512, rope_parameters=dict(full_attention=rope, sliding_attention=rope))
    cfg = Gemma3Config(vision_config=dict(SIGLIP, model_type="siglip_vision_model"), text_config=text,
                       mm_tokens_per_image=4, image_token_index=IMAGE, boi_token_index=6, eoi_token_index=7,
                       tie_word_embeddings=False)
    return sharpen(Gemma3ForConditionalGeneration(cfg), seed)


def gemma_batch(n_image_tokens, family, seed=1):
    """Two left-padded rows with one 16x16 image each; ``token_type_ids`` laid out as the family's processor
    does (PaliGemma: 0 for the whole prompt; Gemma3: 1 on the image placeholders)."""
    g = torch.Generator().manual_seed(seed)
    if family == "paligemma":
        rows = [[IMAGE] * n_image_tokens + [1, 10, 11, 12], [IMAGE] * n_image_tokens + [1, 20, 21, 22, 23, 24, 25]]
    else:
        rows = [[1, 10, 6] + [IMAGE] * n_image_tokens + [7, 11, 12],
                [1, 20, 21, 22, 6] + [IMAGE] * n_image_tokens + [7, 23, 24, 25]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    token_type = torch.zeros_like(ids) if family == "paligemma" else (ids == IMAGE).long()
    pixels = torch.randn(2, 3, 16, 16, generator=g)
    return ids, mask, dict(pixel_values=pixels, token_type_ids=token_type)


def tiny_idefics3(seed=0):
    """Idefics3 / SmolVLM layout: 16x16 image tiles in 4x4 patches, pixel-shuffled by 2: 4 placeholders per tile;
    ``pixel_values`` is 5-D ``[batch, tiles, C, H, W]`` with all-zero padding tiles."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    torch.manual_seed(seed)
    cfg = Idefics3Config(vision_config=dict(SIGLIP), text_config=dict(TEXT, model_type="llama",
                         rope_parameters=dict(rope_type="default", rope_theta=100.0)),
                         image_token_id=IMAGE, scale_factor=2)
    return sharpen(Idefics3ForConditionalGeneration(cfg), seed)


def tiny_llava_next(seed=0, vocab_size=96, image_token=IMAGE):
    """LLaVA-NeXT: 16x16 base tiles in 8x8 patches (4 features), any-resolution grids up to 32x32 with
    unpadding and a newline per feature row, so an image's placeholder count depends on its size."""
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    torch.manual_seed(seed)
    cfg = LlavaNextConfig(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=16, patch_size=8, projection_dim=32,
                                             model_type="clip_vision_model"),
                          text_config=dict(TEXT, model_type="llama", vocab_size=vocab_size,
                                           rope_parameters=dict(rope_type="default", rope_theta=100.0)),
                          image_token_index=image_token, image_grid_pinpoints=[[16, 32], [32, 16], [32, 32]],
                          vision_feature_select_strategy="default", vision_feature_layer=-1)
    return sharpen(LlavaNextForConditionalGeneration(cfg), seed)


# ------------------------------------------------------------------------------ processors (zoo tokenizer)
QWEN_TOKENS = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]


def zoo_tokenizer(extra=()):
    import copy

    from mmspec.zoo import load

    tok = copy.deepcopy(load("vlm-target").tokenizer.tokenizer)
    if extra:
        tok.add_special_tokens({"additional_special_tokens": list(extra)})
    return tok


def qwen_processor():
    """A Qwen2-VL processor over the zoo tokenizer (plus Qwen's vision tokens), 4x4 patches merged 2x2, and
    the ids a tiny target built with ``tiny_qwen_vl(vocab_size=..., ids=...)`` needs."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    tok = zoo_tokenizer(QWEN_TOKENS)
    sizes = dict(patch_size=4, merge_size=2, temporal_patch_size=2)
    proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=16 * 16, max_pixels=32 * 32, **sizes),
                            video_processor=Qwen2VLVideoProcessor(**sizes), tokenizer=tok)
    return proc, len(tok), tuple(tok.convert_tokens_to_ids(QWEN_TOKENS))


def llava_next_processor():
    """A LLaVA-NeXT processor matching ``tiny_llava_next``: 16x16 base tiles, the same grid pinpoints."""
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    tok = zoo_tokenizer()
    images = LlavaNextImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16},
                                     image_grid_pinpoints=[[16, 32], [32, 16], [32, 32]], do_center_crop=False)
    proc = LlavaNextProcessor(image_processor=images, tokenizer=tok, patch_size=8, image_token="<image>",
                              vision_feature_select_strategy="default", num_additional_image_tokens=1)
    return proc, len(tok), tok.convert_tokens_to_ids("<image>")


def pictures():
    from PIL import Image

    g = torch.Generator().manual_seed(5)
    def pic(w, h):
        return Image.fromarray(torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy())
    return pic(30, 16), pic(20, 20), pic(16, 32)


def paligemma_processor():
    """A PaliGemma processor over the zoo tokenizer (plus a BOS token it inserts after the image): 16x16 images,
    16 placeholders; ``token_type_ids`` 0 on the whole prompt."""
    from transformers import PaliGemmaProcessor, SiglipImageProcessor

    tok = zoo_tokenizer()
    tok.add_special_tokens({"bos_token": "<bos>"})
    images = SiglipImageProcessor(size={"height": 16, "width": 16})
    images.image_seq_length = 16
    return PaliGemmaProcessor(image_processor=images, tokenizer=tok), len(tok), tok.convert_tokens_to_ids("<image>")


def speculative(model, drafter, ids, mask, inputs, n):
    """mmspec's decoding of the same ``n`` tokens with ``drafter``."""
    from mmspec import SpeculativeGenerator

    return SpeculativeGenerator(model, drafter).generate(ids, attention_mask=mask, max_new_tokens=n,
                                                         eos_token_id=[], pad_token_id=0, **inputs)


QWEN_PROMPT = "Look: <|vision_start|><|image_pad|><|vision_end|> what is it?"


def write_picture_rows(home, prompt: str = QWEN_PROMPT):
    """``home/rows.jsonl``: one training row (image path, prompt, response) per picture of :func:`pictures`, the
    pictures saved next to it; returns ``home``."""
    import json  # noqa: PLC0415 - test helper

    rows = []
    for i, pic in enumerate(pictures()):
        pic.save(home / f"{i}.png")
        rows.append({"image": str(home / f"{i}.png"), "prompt": prompt, "response": f" answer number {i}"})
    (home / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return home
