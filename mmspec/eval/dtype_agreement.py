"""How exact is "exact" per dtype: greedy agreement with ``target.generate`` on held-out zoo code prompts.

In float32 mmspec's greedy output is bit-identical to ``target.generate``. In reduced precision the
verifier scores a whole draft tree in one forward, whose matmuls round differently from the one-token
steps of plain decoding, so a near-tie between two tokens can flip; HF assisted generation has the same
property. This script measures both against plain ``target.generate`` in the same dtype::

    python -m mmspec.eval.dtype_agreement --dtype bfloat16 --prompts 30

It prints and (with ``--out``) writes a JSON of per-method agreement counts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ..drafters import AutoregressiveDrafter
from ..generator import SpeculativeGenerator
from ..zoo import load
from .code_suite import code_prompts

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def measure(dtype: str = "bfloat16", num_prompts: int = 30, max_new_tokens: int = 64, num_tokens: int = 4,
            home: str | Path | None = None) -> dict:
    """Rows (prompts) on which each method's greedy output equals plain ``target.generate`` in ``dtype``."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {sorted(DTYPES)}")
    target, draft = load("code-target", home), load("code-drafter", home)
    tmodel, dmodel = target.model.to(DTYPES[dtype]), draft.model.to(DTYPES[dtype])
    prompts = code_prompts(target.tokenizer, num_prompts)
    gen = SpeculativeGenerator(tmodel, AutoregressiveDrafter(dmodel, num_tokens=num_tokens))
    common = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    agree = {"chain": 0, "hf-assisted": 0}
    first_diff = {"chain": [], "hf-assisted": []}
    for ids in prompts:
        mask = torch.ones_like(ids)
        ref = tmodel.generate(ids, attention_mask=mask, **common)
        outs = {"chain": gen.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                             eos_token_id=[], pad_token_id=0).sequences,
                "hf-assisted": tmodel.generate(ids, attention_mask=mask, assistant_model=dmodel, **common)}
        for name, out in outs.items():
            if out.shape == ref.shape and torch.equal(out, ref):
                agree[name] += 1
            else:
                n = min(out.shape[1], ref.shape[1])
                diff = (out[0, :n] != ref[0, :n]).nonzero()
                first_diff[name].append(int(diff[0]) - ids.shape[1] if len(diff) else n - ids.shape[1])
    return {"dtype": dtype, "prompts": len(prompts), "max_new_tokens": max_new_tokens, "num_tokens": num_tokens,
            "agree": agree, "first_divergence_at_new_token": first_diff,
            "reference": "target.generate(do_sample=False) in the same dtype", "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mmspec.eval.dtype_agreement", description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--prompts", type=int, default=30)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--num-tokens", type=int, default=4)
    p.add_argument("--out", default=None, help="write the result as JSON here")
    args = p.parse_args(argv)
    res = measure(args.dtype, args.prompts, args.max_new_tokens, args.num_tokens)
    for name, n in res["agree"].items():
        print(f"{res['dtype']}: {name} equals target.generate on {n} of {res['prompts']} prompts")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
