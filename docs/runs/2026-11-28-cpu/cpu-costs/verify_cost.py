"""The code target's forward over N new tokens after a 200-token prompt (stock HF forward, DynamicCache copied per
call; median of 15), twice: what a verify forward of N nodes costs on this CPU against a plain step (N = 1).

    python verify_cost.py"""
import os, time, copy
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.zoo import load
torch.set_num_threads(2)
tgt = load("code-target").model
ids = torch.randint(5, 4000, (1, 200))
with torch.no_grad():
    out = tgt(ids, use_cache=True)
    base = out.past_key_values
    for rep in range(2):
        for N in (1, 2, 4, 8, 12, 16, 24, 32, 48):
            x = torch.randint(5, 4000, (1, N))
            ts = []
            for _ in range(15):
                c = copy.deepcopy(base)
                t = time.perf_counter(); tgt(x, past_key_values=c, use_cache=True); ts.append(time.perf_counter() - t)
            ts.sort(); print(N, f"{1000*ts[len(ts)//2]:.2f} ms")
