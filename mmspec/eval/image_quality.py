"""Sample quality for image generation: Fréchet distance, precision / recall and class fidelity, all on the
zoo classifier's pooled convolutional features (an encoder trained on the same procedural pictures).

* Fréchet distance (Heusel et al., 2017): ‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2 (Σ₁Σ₂)^{1/2}).
* Precision / recall (Kynkäänniemi et al., 2019): a sample is "inside" a set when it falls within some
  member's distance to its k-th nearest neighbour in that set; precision = share of generated samples
  inside the reference set, recall = share of reference samples inside the generated set.
"""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def features(classifier, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """[N, C] globally pooled features of the classifier's last conv stage."""
    out = []
    for i in range(0, images.shape[0], batch):
        out.append(classifier.features(images[i: i + batch]).mean(dim=(2, 3)))
    return torch.cat(out).double()


def frechet_distance(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> float:
    """FD with both covariances regularised by ``eps`` × their mean variance on the diagonal: the classifier's
    ReLU features have dead units, and a singular Σ₁Σ₂ makes the matrix square root (and FD) unstable."""
    from scipy import linalg  # scipy is a dev extra (pyproject): only the image-quality figures need it

    mu1, mu2 = a.mean(0).numpy(), b.mean(0).numpy()
    s1, s2 = np.cov(a.numpy(), rowvar=False), np.cov(b.numpy(), rowvar=False)
    d = s1.shape[0]
    reg = eps * max(np.trace(s1), np.trace(s2)) / d * np.eye(d)
    s1, s2 = s1 + reg, s2 + reg
    covmean, _ = linalg.sqrtm(s1 @ s2, disp=False)
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2.0 * covmean))


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


__all__ = ["features", "frechet_distance", "precision_recall", "class_fidelity"]
