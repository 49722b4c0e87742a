"""How fast this shared VM is right now: 8 rounds of 200 products of a [34, 192] input with 40 [512, 192] weights on
two threads (the verify's kind of product), each round's milliseconds printed. About 770-950 in a quick phase of
2026-11-28, 1200-1550 in a slow one; plain AR's picture time moves far less between them.

    python pulse.py"""
import torch, time
torch.set_num_threads(2)
w=[torch.randn(512,192) for _ in range(40)]; x=torch.randn(34,192)
for r in range(8):
    s=time.perf_counter()
    for _ in range(200):
        for ww in w: torch.nn.functional.linear(x,ww)
    print(f"{(time.perf_counter()-s)*1e3:.0f}", end=" ", flush=True)
    time.sleep(0.5)
print()
