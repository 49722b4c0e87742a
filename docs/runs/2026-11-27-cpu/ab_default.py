"""Interleaved in-process A/B on the code suite (EOS off, 64 new tokens a row, the 16 prompts as batches): HF plain,
mmspec-plain and the default policy (dflash-tree-lookup-auto; a third argument adds always drafting). Per batch size,
each round runs every method on every batch in rotating order; round 0 is a warm-up; median [range] over rounds.

    python docs/runs/2026-11-27-cpu/ab_default.py 8,16 8
"""
import sys
from pathlib import Path

from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27-sizes"))
from ab_sizes import code_models, interleave  # noqa: E402

target, dd = code_models()
gens = {"mmspec-plain": SpeculativeGenerator(target.model, NoDrafter()),
        "auto": SpeculativeGenerator(target.model, AdaptiveDrafter(dd()))}
if len(sys.argv) > 3:
    gens["always"] = SpeculativeGenerator(target.model, dd())
interleave(target, gens, [int(x) for x in sys.argv[1].split(",")], int(sys.argv[2]))
