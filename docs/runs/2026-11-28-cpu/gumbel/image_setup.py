"""What the Gumbel scripts share: the zoo's guided image target, its block drafter and the guided features it
reads, a seeded Gumbel sampler, and the target's log-probabilities over codes."""
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.guidance import DEFAULT_CFG_SCALE
from mmspec.image_codes import guided_on_codes, layout_of
from mmspec.drafters.dflash_io import load_dflash
from mmspec.zoo import load


class ImageSetup:
    def __init__(self, cfg: float = DEFAULT_CFG_SCALE, drafter: str | None = None, seed: int = 0):
        torch.set_num_threads(2)
        self.gen = torch.Generator().manual_seed(seed)
        self.model = load("image-target").model.float().eval()
        self.layout = layout_of(self.model)
        self.guided = guided_on_codes(self.model, self.layout, cfg)
        self.off, self.V = self.layout.code_offset, self.layout.codebook_size
        self.net = (load_dflash(drafter) if drafter else load("image-dflash").model).float().eval()
        self.featured = guided_on_codes(self.model, self.layout, cfg, self.net.hidden_entries)

    def gumbel(self, *shape) -> torch.Tensor:
        u = torch.rand(*shape, generator=self.gen).clamp(1e-20, 1 - 1e-7)
        return -torch.log(-torch.log(u))

    @torch.no_grad()
    def logp(self, ids) -> torch.Tensor:  # token rows [N, T] -> log p over codes after every position [N, T, V]
        return torch.log_softmax(self.guided(input_ids=ids).logits.float()[..., self.off: self.off + self.V], -1)
