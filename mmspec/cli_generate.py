"""``mmspec generate``: text (or an answer about pictures) from ``zoo:NAME`` or a model directory, streamed to the
terminal as each step's tokens are verified, with the call's stats at the end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import TextStreamer
from transformers.utils import logging as hf_logging

from .pipeline import pipeline
from .registry import TEXT_METHODS, VLM_METHODS


def add_generate_parser(sub) -> None:
    gen = sub.add_parser("generate", help="generate text (or answer about pictures with --image) from zoo:NAME or "
                         "a model directory, streamed as it is verified")
    gen.add_argument("prompt", nargs="*", help="prompt text; several prompts run one after another (default: read "
                     "stdin). Escapes such as \\n are kept literally unless --escapes")
    gen.add_argument("--model", default="zoo:code-target", help="zoo:<name> or a checkpoint directory of a causal "
                     "LM or a VLM")
    gen.add_argument("--drafter", default=None, help="zoo:<name>, a drafter directory (causal LM, diffusion LM, "
                     "feature or DFlash drafter) or 'prompt-lookup' (default: the zoo's drafter for zoo targets)")
    gen.add_argument("--method", default=None, help=f"text: {', '.join(TEXT_METHODS)}; VLM: "
                     f"{', '.join(VLM_METHODS)} (default: the route's choice for the drafter)")
    gen.add_argument("--image", action="append", default=[], help="a picture for a VLM target (repeat for several); "
                     "a prompt without the image placeholder gets one per picture in front")
    gen.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt, >= 1")
    gen.add_argument("--do-sample", action="store_true", help="sample (default: greedy)")
    gen.add_argument("--temperature", type=float, default=1.0, help="with --do-sample: > 0 (ignored under greedy, as HF does)")
    gen.add_argument("--top-k", type=int, default=None, help="with --do-sample: >= 0 (unset or 0: off)")
    gen.add_argument("--top-p", type=float, default=None, help="with --do-sample: in (0, 1] (unset: off)")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (prompt i uses seed + i)")
    gen.add_argument("--ignore-eos", action="store_true", help="generate --max-new-tokens tokens past any EOS")
    gen.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (unset: where the model loads)")
    gen.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (unset: float32)")
    gen.add_argument("--escapes", action="store_true", help="turn \\n and \\t in prompts into newlines and tabs")
    gen.add_argument("--no-stream", action="store_true", help="print each answer when it is complete")
    gen.add_argument("--json", action="store_true", help="print one JSON line per prompt (text and stats) instead")
    gen.set_defaults(func=cmd_generate)


def _prompts(args) -> list[str]:
    prompts = list(args.prompt) or [sys.stdin.read()]
    if args.escapes:
        prompts = [p.encode("utf-8").decode("unicode_escape") for p in prompts]
    if any(not p.strip() for p in prompts):
        raise ValueError("empty prompt: give the text to continue (an argument or stdin)")
    return prompts


def _vlm_inputs(pipe, prompt: str, image_paths: list[str]):
    from PIL import Image  # noqa: PLC0415 - pictures only

    images = []
    for path in image_paths:
        if not Path(path).is_file():
            raise ValueError(f"--image {path}: {'not a regular file' if Path(path).exists() else 'no such file'}")
        images.append(Image.open(path).convert("RGB"))
    placeholder = getattr(pipe.generator.processor, "image_token", "<image>")
    if images and placeholder not in prompt:
        prompt = f"{placeholder}\n" * len(images) + prompt
    return [images or None], [prompt]


def _stats_line(out, method: str) -> str:
    tau = f"τ {out.stats.mean_accepted_tokens:.2f}" if out.stats is not None else "τ 1.00 (no drafts)"
    n = out.new_tokens
    return f"[{method}] {tau} · {n} tokens in {out.seconds:.2f} s · {n / max(out.seconds, 1e-9):.1f} tokens/s"


def cmd_generate(args) -> int:
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    prompts = _prompts(args)
    hf_logging.disable_progress_bar()  # the weights' loading bars would interleave with the streamed text
    pipe = pipeline(args.model, drafter=args.drafter, method=args.method, device=args.device, dtype=args.dtype)
    if pipe.route not in ("text", "vlm"):
        raise ValueError(f"{args.model} is an image generator: use `mmspec image --model {args.model}`")
    if args.image and pipe.route != "vlm":
        raise ValueError(f"--image given, but {args.model} is a text-only target")
    sampling = dict(do_sample=args.do_sample, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    for i, prompt in enumerate(prompts):
        streamer = None if args.no_stream or args.json else \
            TextStreamer(pipe.tokenizer, skip_prompt=True, skip_special_tokens=True)
        kw = dict(max_new_tokens=args.max_new_tokens, seed=args.seed + i, stop_at_eos=not args.ignore_eos,
                  streamer=streamer, **sampling)
        if pipe.route == "vlm":
            images, text = _vlm_inputs(pipe, prompt, args.image)
            out = pipe.generate(images=images, prompts=text, **kw)
        else:
            out = pipe.generate(prompt, **kw)
        method = out.config.get("method", pipe.method)
        if args.json:
            print(json.dumps({"prompt": prompt, "text": out.texts[0], "method": method, "seconds": out.seconds,
                              "new_tokens": out.new_tokens,
                              "tau": None if out.stats is None else out.stats.mean_accepted_tokens}))
            continue
        if streamer is None:
            print(out.texts[0])
        print(_stats_line(out, method), file=sys.stderr)
    return 0


__all__ = ["add_generate_parser", "cmd_generate"]
