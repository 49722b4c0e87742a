"""The code target's stock forward over N new tokens after a 200-token prompt, stock products against few_rows.py's W·xᵀ
(up to 11 rows, and padded to 16). python in_model.py"""
import torch, time, copy
torch.set_num_threads(2)
from mmspec.zoo import load
import few_rows
from few_rows import few_row_products
tgt = load("code-target").model
ids = torch.randint(5, 4000, (1, 200))
with torch.no_grad():
    base = tgt(ids, use_cache=True).past_key_values
    for rep in range(2):
      for mode in ("stock", "few11", "few11+pad16"):
        few_rows.PAD_ROWS = 16 if mode == "few11+pad16" else 11
        res = []
        for N in (1, 2, 4, 8, 10, 11, 12, 13, 14, 15, 16, 17):
            x = torch.randint(5, 4000, (1, N)); ts = []
            for _ in range(9):
                c = copy.deepcopy(base)
                if mode == "stock":
                    t = time.perf_counter(); tgt(x, past_key_values=c); ts.append(time.perf_counter() - t)
                else:
                    with few_row_products(tgt):
                        t = time.perf_counter(); tgt(x, past_key_values=c); ts.append(time.perf_counter() - t)
            ts.sort(); res.append(f"{N}:{1000*ts[4]:.1f}")
        print(f"{mode:12s}", " ".join(res), flush=True)
