"""VLM answers, faster and identical: the zoo's LLaVA target with an MSD or FLASH drafter.

Offline by default (the zoo's held-out scenes):
    python examples/vlm_inference.py --method msd
    python examples/vlm_inference.py --method flash --compress-to 4
With a local llava-hf checkpoint and a drafter trained for it by `mmspec train msd --target DIR --data ...`:
    python examples/vlm_inference.py --target /path/llava-1.5-7b-hf --drafter /path/msd --image cat.png \
        --prompt "USER: <image>\nDescribe the picture. ASSISTANT:"
"""

import argparse
import time

from mmspec import VLMGenerator


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="zoo:vlm-target")
    p.add_argument("--drafter", default=None, help="default: the zoo drafter of --method")
    p.add_argument("--method", choices=["msd", "flash", "eagle", "chain", "dynamic", "prompt-lookup"], default="msd",
                   help="chain / dynamic: the zoo's text-only drafter")
    p.add_argument("--tree", choices=["chain", "dynamic"], default="dynamic", help="msd / eagle: their draft shape")
    p.add_argument("--compress-to", type=int, default=None, help="FLASH: compressed tokens per image")
    p.add_argument("--image", action="append", help="image file(s); default: zoo test scenes")
    p.add_argument("--prompt", action="append", help="prompt(s) with the <image> placeholder")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--scenes", type=int, default=4, help="zoo test scenes to answer (without --image)")
    args = p.parse_args()

    drafter = args.drafter or {"msd": "zoo:vlm-msd", "flash": "zoo:vlm-flash", "eagle": "zoo:vlm-eagle",
                               "chain": "zoo:vlm-drafter", "dynamic": "zoo:vlm-drafter",
                               "prompt-lookup": None}[args.method]
    dynamic = args.method == "dynamic" or args.method in ("msd", "eagle") and args.tree == "dynamic"
    kw = {"compress_to": args.compress_to} if args.method == "flash" else {}
    if dynamic:
        kw.update(tree="dynamic", num_tokens=5, top_k=4, num_nodes=16)
    gen = VLMGenerator.from_pretrained(args.target, drafter, method=args.method, **kw)

    if args.image:
        from PIL import Image

        images = [Image.open(f).convert("RGB") for f in args.image]
        prompts = args.prompt or ["<image>\nCaption:"] * len(images)
    else:
        from mmspec.zoo import vlm_data as vd

        scenes = vd.scenes("test", args.scenes)
        images = [sc.image() for sc in scenes]  # captions and questions alternating
        prompts = [vd.with_image(vd.CAPTION_PROMPT if i % 2 == 0 else sc.questions[i % len(sc.questions)].prompt)
                   for i, sc in enumerate(scenes)]
    t0 = time.perf_counter()
    out = gen.generate(images=images, prompts=prompts, max_new_tokens=args.max_new_tokens)
    seconds = time.perf_counter() - t0
    for prompt, text in zip(prompts, out.texts):
        print(f"{prompt.strip()!r} -> {text}")
    s = out.stats
    print(f"{s.new_tokens} tokens in {seconds:.2f}s; mean accepted tokens per target forward τ = "
          f"{s.mean_accepted_tokens:.2f}; drafter share of step time {s.draft_time / (s.draft_time + s.verify_time):.0%}")


if __name__ == "__main__":
    main()
