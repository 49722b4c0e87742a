"""Depth growth, shared by the zoo's deep targets (code, VLM language model, image): a deep Llama started from
a trained shallow one, and the layer ablation that shows every grown layer ends up in use."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..training.loop import model_device
from .streams import mean_loss


@torch.no_grad()
def grow_depth(base: LlamaForCausalLM, config: LlamaConfig, mode: str = "zero",
               copies: tuple[int, ...] | None = None) -> LlamaForCausalLM:
    """Depth growth: each base layer i becomes a group of ``copies[i]`` consecutive deep layers that start as
    copies of it (default: the same number r = deep / base depth for every layer).

    ``mode="zero"``: copies other than the first of each group get zero output projections (``o_proj``,
    ``down_proj``), so the grown model computes exactly the base model's function; the copies only start to
    contribute once training moves them (with little data they may never do: the first grown code target's
    copies stayed unused, per :func:`layer_ablation`).
    ``mode="split"``: every copy keeps the base layer's weights with its output projections divided by its
    group's size, so the group adds about the base layer's update (the function is kept to first order) and
    every layer is in use from the first step; training then differentiates the copies.

    ``copies`` gives each base layer its own group size: a layer whose copies training does not tell apart can
    keep a single copy (the second grown code target's three copies of base layer 0 stayed unused, ablation
    0.002-0.004 nats, while the copies of layers 1-3 were all in use).

    The deep model is created on the CPU (its initialisation draws the same random numbers on every device,
    though the weights it draws are then replaced) and returned on ``base``'s device."""
    if mode not in ("zero", "split"):
        raise ValueError(f"grow_depth mode must be 'zero' or 'split', not {mode!r}")
    n_base, n_deep = base.config.num_hidden_layers, config.num_hidden_layers
    if copies is None:
        if n_deep % n_base:
            raise ValueError(f"cannot grow {n_base} layers to {n_deep}: not a multiple")
        copies = (n_deep // n_base,) * n_base
    copies = tuple(int(c) for c in copies)
    if len(copies) != n_base or min(copies) < 1 or sum(copies) != n_deep:
        raise ValueError(f"copies {copies} must give each of the {n_base} base layers at least one copy and "
                         f"sum to the {n_deep} deep layers")
    deep = LlamaForCausalLM(config)
    outputs = ("self_attn.o_proj.weight", "mlp.down_proj.weight")
    base_state = base.state_dict()
    state = {k: v for k, v in base_state.items() if not k.startswith("model.layers.")}
    j = 0
    for i, group in enumerate(copies):
        src = f"model.layers.{i}."
        for c in range(group):
            for key, value in base_state.items():
                if key.startswith(src):
                    name = key[len(src):]
                    if name in outputs and mode == "split":
                        value = value / group
                    elif name in outputs and c:
                        value = torch.zeros_like(value)
                    state[f"model.layers.{j}.{name}"] = value.clone()
            j += 1
    deep.load_state_dict(state)  # copies across devices where base is on a GPU
    return deep.to(model_device(base))


def _use_layers(model: LlamaForCausalLM, layers: list) -> None:
    """Make ``layers`` the model's decoder stack, renumbered in order (a layer's index is its cache slot)."""
    model.model.layers = torch.nn.ModuleList(layers)
    for k, m in enumerate(layers):
        m.self_attn.layer_idx = k


@torch.no_grad()
def layer_ablation(model: LlamaForCausalLM, windows: torch.Tensor, base: float | None = None) -> list[float]:
    """Held-out loss increase when each decoder layer is skipped in turn: a layer that does nothing
    shows ~0 here, so this is the evidence that every layer of a deep target is trained. ``base``: the model's
    own loss on ``windows`` where the caller already has it."""
    base = mean_loss(model, windows) if base is None else base
    layers = list(model.model.layers)
    out = []
    for i in range(len(layers)):
        _use_layers(model, layers[:i] + layers[i + 1:])
        try:
            out.append(mean_loss(model, windows) - base)
        finally:
            _use_layers(model, layers)
    return out




# A layer is reported unused when skipping it raises held-out loss by less than UNUSED_LAYER_NATS (nats/token)
# *and* by less than UNUSED_LAYER_FRACTION of that loss. The absolute floor alone was set on the code LM (loss
# ~3: the first grown code target's zero-initialised copies measured <= 0.001, its trained layers 0.4-5.8); on a
# model whose held-out loss is itself a few hundredths of a nat (the VLM target's answers: 0.036) every layer sits
# below it, so a layer must also change the loss by less than 1% to count as doing nothing.
UNUSED_LAYER_NATS = 0.01
UNUSED_LAYER_FRACTION = 0.01


def unused_threshold(base_loss: float) -> float:
    """The ablation (loss increase, nats/token) below which a layer counts as unused, for a model whose held-out
    loss on the ablation's data is ``base_loss``."""
    return min(UNUSED_LAYER_NATS, UNUSED_LAYER_FRACTION * abs(base_loss))


def unused_layers(ablation: list[float], base_loss: float) -> list[int]:
    """Indices of layers whose ablation (:func:`layer_ablation`, measured where the model's loss is ``base_loss``)
    shows they barely change the output: a deep target with such layers would be slow for no reason, so
    metrics.json lists them and the committed zoo's tests require the list to be empty."""
    threshold = unused_threshold(base_loss)
    return [i for i, value in enumerate(ablation) if value < threshold]


def drop_layers(model: LlamaForCausalLM, drop: list[int]) -> LlamaForCausalLM:
    """``model`` without the decoder layers ``drop`` (in place): the remaining layers keep their weights and are
    renumbered, and the config says the new depth, so the model saves and loads as an ordinary shallower Llama."""
    gone = set(drop)
    keep = [m for j, m in enumerate(model.model.layers) if j not in gone]
    if not keep:
        raise ValueError(f"cannot drop every layer of a {len(model.model.layers)}-layer model")
    _use_layers(model, keep)
    model.config.num_hidden_layers = len(keep)
    if getattr(model.config, "layer_types", None) is not None:
        model.config.layer_types = [t for j, t in enumerate(model.config.layer_types) if j not in gone]
    return model


@torch.no_grad()
def prune_unused(model: LlamaForCausalLM, windows: torch.Tensor) -> tuple[LlamaForCausalLM, list[dict]]:
    """Drop the layers that skipping costs (almost) nothing on ``windows``, one at a time: the least useful
    unused layer goes, then the ablation is measured again (its group's other copies may now carry more), until
    :func:`unused_layers` is empty. Returns the pruned model and what was dropped, as
    ``{"layer": index in the model as trained, "ablation": its loss increase when dropped}``.

    Why: a grown group of copies can end with one copy its siblings make redundant (the fourth code target:
    layer 9, 0.006 nats); shipping it would make the target slower than its quality needs, which the zoo forbids
    (no unused layers)."""
    original = list(range(len(model.model.layers)))
    dropped = []
    while len(original) > 1:
        base = mean_loss(model, windows)
        ablation = layer_ablation(model, windows, base)
        flagged = unused_layers(ablation, base)
        if not flagged:
            break
        worst = min(flagged, key=lambda i: ablation[i])
        dropped.append({"layer": original[worst], "ablation": ablation[worst]})
        drop_layers(model, [worst])
        del original[worst]
    return model, dropped


__all__ = ["grow_depth", "layer_ablation", "unused_layers", "unused_threshold", "drop_layers", "prune_unused",
           "UNUSED_LAYER_NATS", "UNUSED_LAYER_FRACTION"]
