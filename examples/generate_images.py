"""Class-conditional pictures from the zoo's visual AR model, plain or with LANTERN++ relaxed acceptance.

    python examples/generate_images.py                       # LANTERN++ (its defaults: λ = 10, k = 16, static tree) vs plain AR
    python examples/generate_images.py --lam 5 --classes 0,1,2 --out runs/my_images
    python examples/generate_images.py --drafter sar --tree chain    # image-sar: 4 drafts per drafter forward
    python examples/generate_images.py --lam 50 --tree spine7+1      # the fastest static LANTERN++ measured (README)
"""

import argparse
from pathlib import Path

from mmspec.image_gen import ImageGenerator
from mmspec.zoo.image_data import image_grid


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--classes", default=None, help="comma list of class ids; default: every class")
    p.add_argument("--lam", type=float, default=None, help="LANTERN++'s bound λ (default: the library's, 10)")
    p.add_argument("--lantern-k", type=int, default=None, help="latent neighbours per code (default 16)")
    p.add_argument("--drafter", choices=["ar", "feature", "sar"], default=None,
                   help="the zoo's small AR drafter, image-eagle (feature; the default when built) or image-sar")
    p.add_argument("--tree", default="static", help="chain, static, dynamic or a shape's label (2x1x1x1x1x1, spine7+1)")
    p.add_argument("--cfg-scale", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/examples_images")
    args = p.parse_args()

    gen = ImageGenerator.from_zoo()
    classes = [int(c) for c in args.classes.split(",")] if args.classes else list(range(gen.layout.num_classes))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plain = gen.generate(classes, method="ar", cfg_scale=args.cfg_scale, seed=args.seed)
    fast = gen.generate(classes, method="lantern++", lam=args.lam, lantern_k=args.lantern_k, tree=args.tree,
                        cfg_scale=args.cfg_scale, seed=args.seed, drafter=args.drafter)
    for name, res in (("plain_ar", plain), ("lantern_pp", fast)):
        image_grid(res.images, nrow=len(classes), scale=3).save(out / f"{name}.png")
    s = fast.stats
    print(f"plain AR {plain.seconds:.2f}s; LANTERN++ {fast.seconds:.2f}s ({plain.seconds / fast.seconds:.2f}×), "
          f"τ = {s.mean_accepted_tokens:.2f}, largest mass moved onto one candidate {max(s.moved_mass):.3f}; "
          f"grids in {out}/")


if __name__ == "__main__":
    main()
