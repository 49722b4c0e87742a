"""Where mmspec's loop with no drafter spends a call beyond HF plain `generate`, batch 1, zoo code target:
interleaved timing (median ms per token over rounds) and a cProfile of one call of each, cumulative time of
mmspec's own functions and of the model forward.

    python docs/runs/2026-11-27-gpu/profile_plain.py [--device cuda] [--rounds 10] [--batch 1]"""
import argparse
import cProfile
import io
import os
import pstats
import statistics
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from mmspec.eval.batch_sweep import collate  # noqa: E402
from mmspec.eval.bench import build_runner  # noqa: E402
from mmspec.eval.code_suite import code_prompts  # noqa: E402
from mmspec.zoo import load, use_device  # noqa: E402


def code_setup(device: str, tokens: int, batch: int):
    """HF plain and mmspec-plain runners on the zoo's code target (placed on ``device``), each generating ``tokens``
    tokens a row, and the suite's 16 prompts as left-padded batches of ``batch`` rows on ``device``."""
    use_device(None if device == "cpu" else device)
    entry, draft = load("code-target"), load("code-drafter").model
    prompts, pad = code_prompts(entry.tokenizer, 16), entry.tokenizer.pad_token_id
    batches = [{k: v.to(device) for k, v in collate(prompts[i:i + batch], pad).items()} for i in range(0, 16, batch)]
    runs = {m: build_runner(m, entry.model, draft, None, tokens, dict(do_sample=False, seed=0))
            for m in ("plain", "mmspec-plain")}
    return runs, batches


def sync(device):
    if device != "cpu":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    runs, batches = code_setup(args.device, args.tokens, args.batch)
    batches = batches[:4]
    times = {m: [] for m in runs}
    with torch.inference_mode():
        for m, run in runs.items():
            run(batches[0])
        for r in range(args.rounds):
            for m, run in (runs.items() if r % 2 == 0 else reversed(runs.items())):
                sync(args.device)
                t = time.perf_counter()
                for b in batches:
                    run(b)
                sync(args.device)
                times[m].append((time.perf_counter() - t) * 1000 / (len(batches) * args.tokens))
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"batch {args.batch} ms/step (median of {args.rounds}, spread): "
          + ", ".join(f"{m} {med[m]:.2f} ({min(times[m]):.2f}-{max(times[m]):.2f})" for m in runs)
          + f"; mmspec-plain / plain speed {med['plain'] / med['mmspec-plain']:.3f}")
    for m, run in runs.items():
        prof = cProfile.Profile()
        with torch.inference_mode():
            prof.enable()
            run(batches[0])
            sync(args.device)
            prof.disable()
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("cumulative").print_stats(args.top)
        print(f"===== {m}\n" + "\n".join(s.getvalue().splitlines()[:args.top + 12]))
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("tottime").print_stats(args.top)
        print(f"===== {m} by own time\n" + "\n".join(s.getvalue().splitlines()[:args.top + 12]))


if __name__ == "__main__":
    main()
