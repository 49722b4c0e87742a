"""Count, per generated token, the aten ops (kernel launches on a GPU) and host reads of tensor values (syncs on a
GPU) of HF plain `generate` and of mmspec's loop with no drafter, on the zoo's code target (batch 1 and 16).

    python docs/runs/2026-11-27-gpu/count_ops.py [--device cuda] [--top 25]

On a GPU bound by kernel launches these two counts are most of a step's cost beyond the model's own ops."""
import argparse
import collections
import os

from torch.utils._python_dispatch import TorchDispatchMode

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from profile_plain import code_setup  # noqa: E402  (this folder: the same runners and batches)

HOST_READS = ("_local_scalar_dense", "nonzero", "equal")  # ops that read a tensor's values on the host


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    for b in (1, 16):
        runs, batches = code_setup(args.device, args.tokens, b)
        batch = batches[0]
        counts = {}
        for m, run in runs.items():
            run(batch)  # warm
            with Count() as c:
                run(batch)
            counts[m] = c.ops
            syncs = sum(v for k, v in c.ops.items() if k in HOST_READS)
            print(f"batch {b} {m}: {sum(c.ops.values()) / args.tokens:.0f} ops/token, "
                  f"{syncs / args.tokens:.1f} host reads/token")
        diff = collections.Counter({k: counts["mmspec-plain"][k] - counts["plain"][k]
                                    for k in counts["plain"].keys() | counts["mmspec-plain"].keys()})
        print("  mmspec-plain minus plain, per token:",
              ", ".join(f"{k} {v / args.tokens:+.1f}" for k, v in diff.most_common(args.top) if v)
              + " | fewer: " + ", ".join(f"{k} {v / args.tokens:+.1f}" for k, v in
                                          sorted(diff.items(), key=lambda kv: kv[1])[:10] if v < 0))


if __name__ == "__main__":
    main()
