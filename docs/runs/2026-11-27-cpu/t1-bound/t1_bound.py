"""How much a drafter can gain at T = 1 on the zoo's code target: along the target's own sampled answers to the
suite's prompts, what each next token's distribution p allows.

- ``max p``: the chance the target's draw equals its most likely token (what any deterministic draft of one token
  is accepted with, at best);
- ``sum p^2``: the chance two independent draws agree;
- the expected accepted length of an **oracle block drafter**: slot j's q is the exact marginal of the j-th next
  token given the context (estimated from M sampled continuations, leave-one-out), drafted independently per slot
  as a block drafter does, with p/q rejection (``Σ_x min(p(x|accepted prefix), q_j(x))`` per slot, multiplied along
  the block). No trained block drafter can do better in expectation with one chain; the first slot is exact (α = 1).

    python t1_bound.py [--prompts 16] [--samples 16] [--block 8] --out F"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.eval.code_suite import code_prompts
from mmspec.zoo import load

ap = argparse.ArgumentParser()
ap.add_argument("--prompts", type=int, default=16); ap.add_argument("--samples", type=int, default=16)
ap.add_argument("--block", type=int, default=8); ap.add_argument("--anchors", type=int, default=6)
ap.add_argument("--tokens", type=int, default=64); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
torch.manual_seed(0)
entry = load("code-target"); model = entry.model.float().eval()
prompts = code_prompts(entry.tokenizer, a.prompts)


@torch.no_grad()
def probs(ids):  # [N, T] -> next-token distributions at every position [N, T, V]
    return torch.softmax(model(ids).logits.float(), -1)


maxp, agree, oracle = [], [], []
with torch.no_grad():
    for ids in prompts:
        answer = model.generate(ids, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=a.tokens,
                                min_new_tokens=a.tokens, pad_token_id=0)
        P = ids.shape[1]
        p = probs(answer)[0, P - 1: -1]  # the distribution of each answer token
        maxp += p.max(-1).values.tolist()
        agree += (p * p).sum(-1).tolist()
        # the oracle block drafter at a few anchors along the answer: M continuations of `block` tokens from p
        for t in torch.linspace(0, a.tokens - a.block - 1, a.anchors).long().tolist():
            ctx = answer[:, : P + t]
            rolls = model.generate(ctx.expand(a.samples, -1), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                   max_new_tokens=a.block, min_new_tokens=a.block, pad_token_id=0)
            ps = probs(rolls)[:, ctx.shape[1] - 1: -1]  # [M, block, V]: p along each sampled continuation
            M = a.samples
            for m in range(M):  # roll m plays the accepted path; q_j: the marginal from the other rolls
                q = (ps.sum(0) - ps[m]) / (M - 1)  # [block, V]
                run, total = 1.0, 0.0
                for j in range(a.block):
                    run *= float(torch.minimum(ps[m, j], q[j]).sum()) if j else 1.0
                    total += run
                oracle.append(total)
out = {"prompts": a.prompts, "tokens": a.tokens, "mean_max_p": sum(maxp) / len(maxp),
       "mean_sum_p2": sum(agree) / len(agree), "oracle_block": a.block, "oracle_samples": a.samples,
       "oracle_expected_accepted_drafts": sum(oracle) / len(oracle), "oracle_tau": 1 + sum(oracle) / len(oracle)}
print(json.dumps(out, indent=1))
json.dump(out, open(a.out, "w"), indent=1)
