"""Does the target's distribution after a *wrong* code predict the one after the right code? Along the guided
target's pictures (CFG 3.0, T = 1), at anchors: X_1 is the target's Gumbel-max code after the context, s a different
code (the block drafter's best other than X_1: what a rejected sibling in a tree would hold). Compared for the
position after X_1 (the next step's first slot when X_1 is the bonus): the Gumbel match rate of
argmax(log r + g_2) with the target's code X_2 = argmax(log p(. | ctx, X_1) + g_2), for r = p(. | ctx, s) (the
sibling's distribution, which a verify forward computed) and for r = the block drafter's slot q at X_1.

    python sibling_bound.py [--pictures 4] [--anchors 24] --out F"""
import argparse, json
import torch
from image_setup import ImageSetup
from mmspec.drafters.dflash_model import teacher_forced_logits

ap = argparse.ArgumentParser()
ap.add_argument("--pictures", type=int, default=4); ap.add_argument("--anchors", type=int, default=24)
ap.add_argument("--out", required=True)
a = ap.parse_args()
S = ImageSetup()
model, layout, off, V, net, featured, gumbel, logp = S.model, S.layout, S.off, S.V, S.net, S.featured, S.gumbel, S.logp


@torch.no_grad()
def picture_of(c):
    ids = layout.class_tokens([c])[:, None]
    for _ in range(layout.num_codes):
        ids = torch.cat([ids, (logp(ids)[:, -1] + gumbel(1, V)).argmax(-1, keepdim=True) + off], 1)
    return ids


hits = {"sibling": 0, "drafter_after_X1": 0, "drafter_slot2": 0, "mix": 0}
overlap = {"sibling": 0.0, "drafter_slot2": 0.0}
n = 0
for c in range(a.pictures):
    pic = picture_of(c)
    anchors = torch.linspace(1, layout.num_codes - 3, a.anchors).long().tolist()
    feats = net.select_features(featured(input_ids=pic, output_hidden_states=True).hidden_states)
    lq = torch.log_softmax(teacher_forced_logits(net, model.get_input_embeddings(), model.get_output_embeddings(),
                                                 pic, feats, torch.tensor([anchors]))[0].float()[..., off: off + V], -1)
    for i, t in enumerate(anchors):
        ctx = pic[:, : 1 + t]  # root = pic[t]; X_1 = pic[t + 1]
        x1 = int(pic[0, t + 1]) - off
        order = lq[i, 0].argsort(descending=True).tolist()
        s = next(x for x in order if x != x1)
        g2 = gumbel(V)
        rows = torch.cat([torch.cat([ctx, torch.tensor([[x1 + off]])], 1), torch.cat([ctx, torch.tensor([[s + off]])], 1)])
        lp = logp(rows)[:, -1]  # [2, V]: after X_1, after the sibling s
        x2 = int((lp[0] + g2).argmax())
        hits["sibling"] += int((lp[1] + g2).argmax()) == x2
        hits["drafter_slot2"] += int((lq[i, 1] + g2).argmax()) == x2
        mix = torch.logaddexp(lp[1] + torch.log(torch.tensor(0.5)), lq[i, 1] + torch.log(torch.tensor(0.5)))
        hits["mix"] += int((mix + g2).argmax()) == x2
        overlap["sibling"] += float(torch.minimum(lp[0].exp(), lp[1].exp()).sum())
        overlap["drafter_slot2"] += float(torch.minimum(lp[0].exp(), lq[i, 1].exp()).sum())
        n += 1
out = {"samples": n, "gumbel_match": {k: v / n for k, v in hits.items()},
       "overlap_with_p_after_X1": {k: v / n for k, v in overlap.items()}}
print(json.dumps(out, indent=1))
json.dump(out, open(a.out, "w"), indent=1)
