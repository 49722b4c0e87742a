"""What FLASH's visual-token compression saves at LLaVA-1.5 scale of visual context (576 image tokens).

A tiny *random* model laid out like llava-hf/llava-1.5-7b-hf (336-px images, 14-px patches: 576 image tokens)
runs the same speculative loop with an MSD drafter (every visual entry kept) and FLASH drafters compressing
each image to 64 or 8 entries. Prints the drafter's prompt entries and its time per decoding step
(prefill amortised). Random weights: acceptance is meaningless here, only the drafter's cost is measured.

    OMP_NUM_THREADS=1 python examples/flash_compression_cost.py
    python examples/flash_compression_cost.py --quick     # a few tokens, one timing (a smoke run)

With ``--zoo`` it measures the *trained* zoo instead (issue 15, item 2): ``vlm-flash`` at compress_to 1, 4, 8
and 16 and uncompressed (``vlm-msd``, the same one-layer drafter fed every visual token), on held-out scenes:
one drafter forward's cost (1 thread, median), drafting time per step, τ, and greedy exactness::

    python examples/flash_compression_cost.py --zoo                  # the zoo in $MMSPEC_HOME or zoo/
    python examples/flash_compression_cost.py --zoo --home /tmp/h --prompts 2 --max-new-tokens 12 --quick --no-stop-at-eos
"""

import argparse

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from mmspec import SpeculativeGenerator
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="8 tokens, one timed run: checks it runs, not the cost")
    p.add_argument("--zoo", action="store_true", help="measure the trained zoo's vlm-flash / vlm-msd instead")
    p.add_argument("--home", default=None, help="with --zoo: the zoo home (default $MMSPEC_HOME or zoo/)")
    p.add_argument("--prompts", type=int, default=16, help="with --zoo: held-out scenes (captions)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--no-stop-at-eos", action="store_true",
                   help="with --zoo: always generate --max-new-tokens (for untrained micro builds)")
    p.add_argument("--json", default=None, help="with --zoo: also write the figures to this file")
    args = p.parse_args()
    if args.zoo:
        return zoo_sweep(args)
    tokens, repeats = (8, 1) if args.quick else (64, 3)
    torch.manual_seed(0)
    vision = CLIPVisionConfig(image_size=336, patch_size=14, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=2)
    text = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048, pad_token_id=0)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=1000, vision_feature_layer=-2,
                      vision_feature_select_strategy="default", image_seq_length=576)
    target = LlavaForConditionalGeneration(cfg).eval()
    ids = torch.tensor([[5, 6] + [1000] * 576 + list(range(10, 30))])
    pixels = torch.randn(1, 3, 336, 336)
    runs = [("MSD (no compression)", "msd", {}, {}),
            ("FLASH, 64 per image", "flash", dict(compress_tokens=64, sar_tokens=1), dict(compress_to=64)),
            ("FLASH, 8 per image", "flash", dict(compress_tokens=64, sar_tokens=1), dict(compress_to=8))]
    for name, method, net_kw, drafter_kw in runs:
        net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **net_kw))
        drafter = FeatureDrafter(net, target, num_tokens=4, **drafter_kw)
        engine = SpeculativeGenerator(target, drafter)
        engine.generate(ids, pixel_values=pixels, max_new_tokens=8, eos_token_id=[])  # warm-up
        best = float("inf")
        for _ in range(repeats):
            s = engine.generate(ids, pixel_values=pixels, max_new_tokens=tokens, eos_token_id=[]).stats
            best = min(best, s.draft_time / (s.target_forwards - 1))
        print(f"{name:24s} drafter prompt entries {drafter.prompt_entries(ids):4d}   drafter time per step {1000 * best:.2f} ms")


def zoo_sweep(args):
    import json

    from mmspec.eval.vlm_suite import compression_sweep, sweep_table

    torch.set_num_threads(1)
    result = compression_sweep(args.home, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                               repeats=5 if args.quick else 100, stop_at_eos=not args.no_stop_at_eos)
    print("\n".join(sweep_table(result)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
