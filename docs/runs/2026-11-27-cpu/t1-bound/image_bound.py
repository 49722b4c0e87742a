"""The image twin of ``t1_bound.py``: how much any lossless drafter can gain on the zoo's image target (CFG 3.0,
T = 1, no top-k: the image suite's lossless setting), along the target's own sampled pictures.

- ``max p``: the chance the guided target's draw equals its most likely code (a deterministic one-code draft is
  accepted with this, at best);
- ``sum p^2``: the chance two independent draws agree;
- an **oracle block drafter**: slot j's q is the exact marginal of the j-th next code given the codes so far
  (estimated from M sampled continuations, leave-one-out), each slot drafted independently as a block drafter
  does, verified by p/q rejection (``Σ_x min(p(x | accepted prefix), q_j(x))`` per slot, multiplied along the
  block). No trained block drafter does better in expectation with one chain; slot 1 is exact.
- the same expectation for a **trained block drafter** (``--drafter``, default the zoo's ``image-dflash``): its slot
  q's at the same anchors (teacher-forced: the block reads the guided target's features of the picture so far),
  against the same sampled continuations, so the two figures differ only in q.

    python image_bound.py [--pictures 8] [--samples 24] [--block 12] [--anchors 6] [--drafter DIR] --out F"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.guidance import DEFAULT_CFG_SCALE
from mmspec.image_codes import guided_on_codes, layout_of
from mmspec.drafters.dflash_io import load_dflash
from mmspec.drafters.dflash_model import teacher_forced_logits
from mmspec.zoo import load

ap = argparse.ArgumentParser()
ap.add_argument("--pictures", type=int, default=8); ap.add_argument("--samples", type=int, default=24)
ap.add_argument("--block", type=int, default=12); ap.add_argument("--anchors", type=int, default=6)
ap.add_argument("--cfg", type=float, default=DEFAULT_CFG_SCALE); ap.add_argument("--out", required=True)
ap.add_argument("--drafter", default=None)
a = ap.parse_args()
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
model = load("image-target").model.float().eval()
layout = layout_of(model)
guided = guided_on_codes(model, layout, a.cfg)
off, V = layout.code_offset, layout.codebook_size
net = (load_dflash(a.drafter) if a.drafter else load("image-dflash").model).float().eval()
featured = guided_on_codes(model, layout, a.cfg, net.hidden_entries)


@torch.no_grad()
def drafter_q(picture, anchors):  # [1, T] tokens, anchors (root indices) -> the drafter's slot q's [m, B-1, V]
    feats = net.select_features(featured(input_ids=picture, output_hidden_states=True).hidden_states)
    logits = teacher_forced_logits(net, model.get_input_embeddings(), model.get_output_embeddings(), picture,
                                   feats, torch.tensor([anchors]))[0]
    return torch.softmax(logits.float()[..., off: off + V], -1)


@torch.no_grad()
def probs(ids):  # token rows [N, T] -> the guided distribution over codes after every position [N, T, V]
    return torch.softmax(guided(input_ids=ids).logits.float()[..., off: off + V], -1)


@torch.no_grad()
def roll(ids, n):  # n more codes per row, sampled from the guided target at T = 1
    for _ in range(n):
        code = torch.multinomial(probs(ids)[:, -1], 1, generator=gen)
        ids = torch.cat([ids, code + off], 1)
    return ids


maxp, agree, oracle, per_slot = [], [], [], [[] for _ in range(a.block)]
trained, trained_slot = [], [[] for _ in range(a.block)]
classes = torch.arange(a.pictures) % layout.num_classes
for c in classes.tolist():
    picture = roll(layout.class_tokens([c])[:, None], layout.num_codes)
    p = probs(picture)[0, :-1]  # the distribution each code was drawn from
    maxp += p.max(-1).values.tolist()
    agree += (p * p).sum(-1).tolist()
    anchors = torch.linspace(0, layout.num_codes - a.block - 1, a.anchors).long().tolist()
    qd = drafter_q(picture, anchors)
    for i, t in enumerate(anchors):
        ctx = picture[:, : 1 + t]
        rolls = roll(ctx.expand(a.samples, -1), a.block)
        ps = probs(rolls)[:, ctx.shape[1] - 1: -1]  # [M, block, V]
        M = a.samples
        for m in range(M):
            q = (ps.sum(0) - ps[m]) / (M - 1)
            run, total = 1.0, 0.0
            for j in range(a.block):
                run *= float(torch.minimum(ps[m, j], q[j]).sum()) if j else 1.0
                per_slot[j].append(run)
                total += run
            oracle.append(total)
            run, total = 1.0, 0.0
            for j in range(a.block):
                run *= float(torch.minimum(ps[m, j], qd[i, j]).sum())
                trained_slot[j].append(run)
                total += run
            trained.append(total)
out = {"pictures": a.pictures, "codes_per_picture": layout.num_codes, "cfg_scale": a.cfg,
       "mean_max_p": sum(maxp) / len(maxp), "mean_sum_p2": sum(agree) / len(agree), "oracle_block": a.block,
       "oracle_samples": a.samples, "oracle_reach_per_slot": [sum(s) / len(s) for s in per_slot],
       "oracle_expected_accepted_drafts": sum(oracle) / len(oracle), "oracle_tau": 1 + sum(oracle) / len(oracle),
       "drafter": a.drafter or "zoo:image-dflash", "drafter_reach_per_slot": [sum(s) / len(s) for s in trained_slot],
       "drafter_expected_accepted_drafts": sum(trained) / len(trained), "drafter_tau": 1 + sum(trained) / len(trained)}
print(json.dumps(out, indent=1))
json.dump(out, open(a.out, "w"), indent=1)
