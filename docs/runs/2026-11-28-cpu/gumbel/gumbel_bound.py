"""Would Gumbel-coupled verification beat p/q rejection on the zoo's image target?

Gumbel-max sampling draws a code as argmax(log p + g) with g i.i.d. Gumbel noise. Fix the noise of every picture
position from the seed, and the target's sampled picture becomes a deterministic function of the seed: a draft is
accepted iff it equals the target's argmax(log p + g) at its position (a greedy test), the output equals plain
Gumbel-max AR with the same seed bit for bit, and a drafter that knows g can propose argmax(log q + g) or the
top-k of log q + g (a tree). This script measures, along the target's own pictures (CFG 3.0, T = 1) at anchors
where the block drafter runs teacher-forced:

- ``pq_chain``: the expected accepted drafts of p/q rejection on a chain (prod_j sum_x min(p_j, q_j));
- ``gumbel_chain``: the accepted drafts when slot j proposes argmax(log q_j + g_j);
- ``gumbel_templates``: the accepted depth for rank templates (sets of rank sequences under log q_j + g_j).

    python gumbel_bound.py [--pictures 8] [--noises 24] [--block 12] [--anchors 6] [--drafter DIR] --out F"""
import argparse, json
import torch
from image_setup import ImageSetup
from mmspec.guidance import DEFAULT_CFG_SCALE
from mmspec.drafters.dflash_model import teacher_forced_logits

ap = argparse.ArgumentParser()
ap.add_argument("--pictures", type=int, default=8); ap.add_argument("--noises", type=int, default=24)
ap.add_argument("--block", type=int, default=12); ap.add_argument("--anchors", type=int, default=6)
ap.add_argument("--cfg", type=float, default=DEFAULT_CFG_SCALE); ap.add_argument("--out", required=True)
ap.add_argument("--drafter", default=None)
a = ap.parse_args()
S = ImageSetup(a.cfg, a.drafter)
model, layout, off, V, net, featured, gumbel, logp = S.model, S.layout, S.off, S.V, S.net, S.featured, S.gumbel, S.logp


@torch.no_grad()
def drafter_logq(picture, anchors):
    feats = net.select_features(featured(input_ids=picture, output_hidden_states=True).hidden_states)
    logits = teacher_forced_logits(net, model.get_input_embeddings(), model.get_output_embeddings(), picture,
                                   feats, torch.tensor([anchors]))[0]
    return torch.log_softmax(logits.float()[..., off: off + V], -1)


@torch.no_grad()
def roll(ids, noise):  # ids [N, T], noise [N, n, V]: Gumbel-max continuation of n codes
    for j in range(noise.shape[1]):
        code = (logp(ids)[:, -1] + noise[:, j]).argmax(-1, keepdim=True)
        ids = torch.cat([ids, code + off], 1)
    return ids


def accepted(ranks, template):  # ranks [block] of the target's codes; template: set of rank tuples
    d = 0
    while d < len(ranks) and tuple(ranks[: d + 1]) in template:
        d += 1
    return d


def best_first(scores, nodes, K=4):  # DDTree's search on per-slot scores [block][V] (descending top-K lists)
    import heapq
    heap, tree, n = [(-scores[0][0], 0, 0, ())], set(), 0
    while heap and n < nodes:
        neg, slot, rank, parent = heapq.heappop(heap)
        path = parent + (rank,)
        tree.add(path); n += 1
        if rank + 1 < K:
            heapq.heappush(heap, (neg + scores[slot][rank] - scores[slot][rank + 1], slot, rank + 1, parent))
        if slot + 1 < len(scores):
            heapq.heappush(heap, (neg - scores[slot + 1][0], slot + 1, 0, path))
    return tree


def spine(k_by_depth):  # every rank sequence with rank_j < k_j
    out, frontier = set(), [()]
    for k in k_by_depth:
        frontier = [p + (r,) for p in frontier for r in range(k)]
        out.update(frontier)
    return out


TEMPLATES = {
    "chain12": spine([1] * 12), "2x1": spine([2] + [1] * 11), "2x2x1": spine([2, 2] + [1] * 10),
    "3x2x1": spine([3, 2] + [1] * 9), "4x1": spine([4] + [1] * 11), "2x2x2x1": spine([2, 2, 2] + [1] * 9),
}
BUDGETS, TEMPS = (6, 8, 12, 16), (0.5, 1.0, 2.0)
bf = {f"n{n}-T{T}": [] for n in BUDGETS for T in TEMPS}
pq, gch, gt, pq_slot, g_slot = [], [], {k: [] for k in TEMPLATES}, [0.0] * a.block, [0.0] * a.block
rank_hist = [[0] * 9 for _ in range(a.block)]
classes = torch.arange(a.pictures) % layout.num_classes
for c in classes.tolist():
    first = gumbel(1, layout.num_codes, V)
    picture = roll(layout.class_tokens([c])[:, None], first)
    anchors = torch.linspace(0, layout.num_codes - a.block - 1, a.anchors).long().tolist()
    lq = drafter_logq(picture, anchors)[:, : a.block]  # [m, block, V]
    for i, t in enumerate(anchors):
        ctx = picture[:, : 1 + t].expand(a.noises, -1)
        g = gumbel(a.noises, a.block, V)
        rolls = roll(ctx, g)
        lp = logp(rolls)[:, ctx.shape[1] - 1: -1]  # [M, block, V]
        codes = rolls[:, ctx.shape[1]:] - off  # [M, block]
        pert = lq[i][None] + g  # [M, block, V]
        ranks = (pert > pert.gather(2, codes[..., None])).sum(-1)  # [M, block]: rank of the target's code
        for m in range(a.noises):
            run, total = 1.0, 0.0
            for j in range(a.block):
                run *= float(torch.minimum(lp[m, j].exp(), lq[i, j].exp()).sum())
                pq_slot[j] += run
                total += run
            pq.append(total)
            r = ranks[m].tolist()
            d = accepted(r, TEMPLATES["chain12"])
            gch.append(d)
            for j in range(d):
                g_slot[j] += 1
            for j in range(a.block):
                rank_hist[j][min(r[j], 8)] += 1
            for T in TEMPS:
                sc = torch.log_softmax(pert[m] / T, -1).topk(4, -1).values.tolist()
                for nb in BUDGETS:
                    bf[f"n{nb}-T{T}"].append(accepted(r, best_first(sc, nb)))
            for k, tpl in TEMPLATES.items():
                gt[k].append(accepted(r, tpl))
n = len(pq)
out = {"pictures": a.pictures, "noises": a.noises, "block": a.block, "anchors": a.anchors,
       "drafter": a.drafter or "zoo:image-dflash", "samples": n,
       "pq_chain_accepted": sum(pq) / n, "pq_reach_per_slot": [s / n for s in pq_slot],
       "gumbel_chain_accepted": sum(gch) / n, "gumbel_reach_per_slot": [s / n for s in g_slot],
       "gumbel_templates_accepted": {k: sum(v) / n for k, v in gt.items()},
       "gumbel_best_first_accepted": {k: sum(v) / n for k, v in bf.items()},
       "template_nodes": {k: len(v) + 1 for k, v in TEMPLATES.items()},
       "rank_of_target_code_per_slot": [[x / n for x in h] for h in rank_hist]}
print(json.dumps(out, indent=1))
json.dump(out, open(a.out, "w"), indent=1)
