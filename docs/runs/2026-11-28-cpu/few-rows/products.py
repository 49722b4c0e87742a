"""The code target's 106 matrices multiplied by M rows, F.linear (x·Wᵀ) against W·xᵀ and chunked W·xᵀ. python products.py"""
import torch, time, torch.nn.functional as F
torch.set_num_threads(2)
from mmspec.zoo import load
tgt = load("code-target").model
Ws = [m.weight for n, m in tgt.named_modules() if isinstance(m, torch.nn.Linear)]
def a(x, w): return torch.mm(w, x.t()).t().contiguous()
def chunk(c):
    def f(x, w):
        return torch.cat([torch.mm(w, x[i:i+c].t()).t() for i in range(0, x.shape[0], c)], 0)
    return f
def run(fn, M):
    x = {w.shape[1]: torch.randn(M, w.shape[1]) for w in Ws}
    ts = []
    for r in range(11):
        t = time.perf_counter()
        for w in Ws: fn(x[w.shape[1]], w)
        ts.append(time.perf_counter() - t)
    ts.sort(); return round(1000*ts[5], 2)
fns = {"linear": lambda x, w: F.linear(x, w), "mmT": a, "chunk4": chunk(4), "chunk8": chunk(8)}
for M in (1, 2, 4, 6, 8, 10, 12, 16, 18, 24, 32):
    print(M, {k: run(f, M) for k, f in fns.items()})
