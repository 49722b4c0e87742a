"""How well the code drafters' slot distributions overlap the target's at T = 1, and whether dividing the drafter's
logits by a temperature s (q = softmax(logits / s)) raises it: α_k = Σ min(p, q_k) on the target's own T = 1
samples from held-out prompts, teacher-forced (every block sees the true context), and the expected accepted length
of a chain of independent draws, Σ_k Π_{j≤k} α_j.

    python overlap_code.py [--data humaneval] --prompts 32 --out F   (64 new tokens per prompt)"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import torch
from interleave import code_run
from mmspec.training.dflash import slot_labels, slot_logits, slot_target_logprobs, target_outputs

a, model, net, calls = code_run(__doc__)
scales = [0.8, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
B = net.config.block_size if hasattr(net.config, "block_size") else 16
over = {s: torch.zeros(B - 1) for s in scales}; acc = {s: 0.0 for s in scales}
count = torch.zeros(B - 1); blocks = 0
for i, (ids, _) in enumerate(calls):
    torch.manual_seed(i)
    with torch.no_grad():
        seq = model.generate(ids, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=64,
                             min_new_tokens=64, pad_token_id=0)
    P, T = ids.shape[1], seq.shape[1]
    anchors = torch.arange(P - 1, T - 1)[None]
    batch = {"tokens": seq, "lengths": torch.tensor([T]), "anchors": anchors}
    with torch.no_grad():
        feats, tlogits = target_outputs(model, net, seq)
        logits = slot_logits(net, model, batch, feats)
        labels, valid, pos = slot_labels(batch, B)
        p = slot_target_logprobs(model, batch, pos, tlogits).exp()
        for s in scales:
            al = torch.minimum(p, torch.softmax(logits / s, -1)).sum(-1) * valid
            over[s] += al.sum((0, 1)); acc[s] += float(al.cumprod(-1).sum(-1).sum())
    count += valid.sum((0, 1)).float(); blocks += anchors.shape[1]
res = {str(s): {"overlap": (over[s] / count.clamp(min=1)).tolist(), "chain_accepted": acc[s] / blocks} for s in scales}
for s in scales:
    r = res[str(s)]
    print(f"s={s:4.2f} accepted {r['chain_accepted']:.3f}  overlap " + " ".join(f"{x:.3f}" for x in r["overlap"][:6]))
json.dump({"args": vars(a), "results": res}, open(a.out, "w"), indent=1)
