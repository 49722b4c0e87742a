"""Side by side in one process: `dflash-lookup-cut` drafting with the drafter's float32 weights against its int8
weight-only products (`DFlashDrafter(weights="int8")`: layers, fc and draft head, `mmspec.kernels.int8_linear`), on
the same prompts, rounds interleaved (greedy, every output compared with plain decoding's); also the drafting step's
mean time (propose, ms) per variant.

    python ab_int8.py [--data humaneval] --prompts 24 --rounds 2 --out F"""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, weights_ab
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.registry import DFLASH_LOOKUP_CUT

a, model, net, calls = code_run(__doc__)
drafters = {w: DFlashDrafter(net, model, weights=w, **DFLASH_LOOKUP_CUT) for w in ("float", "int8")}
weights_ab(a, model, calls, drafters, "propose_sized", "cut")
