"""Sample quality for image generation: Fréchet distance, precision / recall and class fidelity, all on the
zoo classifier's pooled convolutional features (an encoder trained on the same procedural pictures).

* Fréchet distance (Heusel et al., 2017): ‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2 (Σ₁Σ₂)^{1/2}).
* Precision / recall (Kynkäänniemi et al., 2019): a sample is "inside" a set when it falls within some
  member's distance to its k-th nearest neighbour in that set; precision = share of generated samples
  inside the reference set, recall = share of reference samples inside the generated set.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def features(classifier, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """[N, C] globally pooled features of the classifier's last conv stage."""
    out = []
    for i in range(0, images.shape[0], batch):
        out.append(classifier.features(images[i: i + batch]).mean(dim=(2, 3)))
    return torch.cat(out).double()


class _Precomputed(torch.nn.Module):
    """torchmetrics' feature-extractor slot filled by features already taken (:func:`features`): the same rows
    serve the Fréchet distance and precision / recall, so the classifier runs once per picture."""

    def __init__(self, num_features: int):
        super().__init__()
        self.num_features = num_features

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return rows


def frechet_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """FD between two sets of feature rows, computed by torchmetrics' ``FrechetInceptionDistance`` with the zoo
    classifier's pooled features as the custom feature extractor (its means, covariances and matrix square root)."""
    from torchmetrics.image.fid import FrechetInceptionDistance  # only the image-quality figures need it

    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"frechet_distance needs two [N, C] feature sets of one width, got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    if min(a.shape[0], b.shape[0]) < 2:
        raise ValueError("frechet_distance needs at least two pictures per set (a covariance)")
    fid = FrechetInceptionDistance(feature=_Precomputed(a.shape[1])).double()
    fid.update(a.double(), real=True)
    fid.update(b.double(), real=False)
    return float(fid.compute())


def precision_recall(real: torch.Tensor, fake: torch.Tensor, k: int = 3) -> tuple[float, float]:
    def radii(x):
        d = torch.cdist(x, x)
        return d.kthvalue(k + 1, dim=1).values  # k-th neighbour, excluding itself

    r_real, r_fake = radii(real), radii(fake)
    precision = (torch.cdist(fake, real) <= r_real[None, :]).any(1).double().mean()
    recall = (torch.cdist(real, fake) <= r_fake[None, :]).any(1).double().mean()
    return float(precision), float(recall)


@torch.no_grad()
def class_fidelity(classifier, images: torch.Tensor, labels) -> float:
    labels = torch.as_tensor(labels)
    keep = labels >= 0
    if not keep.any():
        return float("nan")
    return float((classifier.predict(images[keep]) == labels[keep]).double().mean())


def fd_against_spread(fd: float, ar_fds: list[float]) -> str:
    """Where an FD lies against plain AR's run-to-run FDs, the noise a relaxed method's distortion is judged
    against: "inside" their range, or how far above its top."""
    top = max(ar_fds)
    return "inside" if fd <= top else f"+{fd - top:.2f} above"


__all__ = ["fd_against_spread", "features", "frechet_distance", "precision_recall", "class_fidelity"]
