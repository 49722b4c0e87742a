"""Training a DFlash block-diffusion drafter against a frozen target (arXiv 2602.06036, Sec. 3.3).

Data: the target's own responses (:class:`~mmspec.training.deer.Generations`: a prefix, then the target's greedy
continuation; or :class:`Responses` of any lengths). Each step runs the frozen target once over the rows (``output_hidden_states``) for the K named layers'
features and its distributions, then the drafter over **many random anchors per row in one forward**
(:func:`~mmspec.drafters.dflash_model.teacher_forced_logits`: block ``a`` sees the context before ``a`` and itself).
Anchors lie in the continuation (a block's root is a token the target emitted, as at decoding time), with at least
one label after them.

Loss per slot k = 1..B−1 (the token k after the anchor), weighted ``exp(−(k−1)/γ)`` (the paper's decay; γ = 7 at
B = 16): cross-entropy on the target's token plus, optionally (``kl_weight``), the KL divergence to the target's
full distribution at that position (beyond the paper: what sampling at T > 0 accepts is 1 − TV(p, q)). With cached
features the target's distributions come from its last hidden state, cached beside them ([N, W, H] float16, the LM
head applied at the labelled positions only), so KL costs a step what cross-entropy does.

Compression (VLM targets, a drafter with visual queries): ``compress_choices`` lists the settings a step draws from
(0 = every picture position in the context, k = each picture as k entries, FLASH's nested queries), so one drafter
serves all of them; held-out selection averages the accepted length over the settings.

Selection: the paper warns that teacher-forced accuracy misleads; the figure that picks the kept weights is the
**greedy accepted length** of a block on held-out rows: from each validation anchor, the number of leading slots
whose argmax equals the target's token (exactly what a chain of the whole block would get accepted at that point of
the target's own decoding, the bonus token aside). ``train_loop`` minimises, so it is given its negative. A drafter for
sampling calls is picked by ``select_by="sampled"`` instead: the expected length of a chain of independent draws
from the slots accepted by the lossless rule at T = 1, Σ_k Π_{j≤k} α_j with α_j = Σ_v min(p_j, q_j) (slot j's overlap
with the target's distribution given the true context: teacher-forced, as the greedy figure is).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from ..drafters.dflash_model import DFlashDraftModel, check_block, emitted, teacher_forced_logits
from .loop import load_checkpoint, model_device, on_model, save_checkpoint, train_loop


SELECT_BY = ("greedy", "sampled")


@dataclass
class DFlashTrainConfig:
    steps: int = 3000
    budget_s: float = 3 * 3600.0
    batch_size: int = 16
    anchors: int = 16  # blocks per row per step
    gamma: float = 7.0  # slot weight exp(-(k-1)/gamma)
    kl_weight: float = 0.0  # 0 = the paper's CE only; > 0 adds KL to the target's distributions (cached or online)
    cache_features: bool = True  # run the target once per row up front (float16 features), not once per step
    lr: float = 1.5e-3
    warmup: int = 100
    eval_every: int = 250
    patience: int = 4
    val_rows: int = 128
    seed: int = 2602
    compress_choices: tuple[int, ...] = ()  # per step, one of these (0: the full context); () = never compress
    trainable: tuple[str, ...] = ()  # names (prefixes) of the only parameters trained, the rest frozen; () = all
    block_choices: tuple[int, ...] = ()  # per step, blocks of one of these lengths (0: the whole block); () = whole
    select_by: str = "greedy"  # held-out figure the kept weights maximise: "greedy" or "sampled" (accepted length)

    def __post_init__(self):
        if self.select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {SELECT_BY}, got {self.select_by!r}")


@dataclass
class Responses:
    """Rows of prompt + target response of any lengths: ``tokens[i, :lengths[i]]``, the response from
    ``prefix[i]`` on (right padded). :class:`~mmspec.training.deer.Generations` is the fixed-length case."""

    tokens: torch.Tensor  # [N, W]
    prefix: torch.Tensor  # [N]
    lengths: torch.Tensor  # [N]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @classmethod
    def from_rows(cls, rows: list[tuple[list[int], list[int]]], pad_id: int = 0) -> "Responses":
        """From (prompt ids, response ids) pairs; every response needs at least 2 tokens."""
        short = [i for i, (_, r) in enumerate(rows) if len(r) < 2]
        if short:
            raise ValueError(f"{len(short)} response(s) shorter than 2 tokens (e.g. row {short[0]}): a block needs a "
                             "root and a label")
        width = max(len(p) + len(r) for p, r in rows)
        tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
        for i, (p, r) in enumerate(rows):
            tokens[i, : len(p) + len(r)] = torch.tensor(list(p) + list(r))
        return cls(tokens, torch.tensor([len(p) for p, _ in rows]), torch.tensor([len(p) + len(r) for p, r in rows]))

    def answer_ids(self) -> list[int]:
        """Every distinct id of the responses (prompts left out), ascending: a drafter's draft vocabulary (FR-Spec,
        arXiv 2502.14856) when the responses are its target's own answers."""
        at = torch.arange(self.tokens.shape[1])[None, :]
        answers = (at >= self.prefix[:, None]) & (at < self.lengths[:, None])
        return self.tokens[answers].unique().tolist()

    def rows(self) -> list[tuple[list[int], list[int]]]:
        """The (prompt ids, response ids) pairs back (``from_rows(data.rows())`` rebuilds ``data``)."""
        return [(t[:p].tolist(), t[p:n].tolist()) for t, p, n in zip(self.tokens, self.prefix.tolist(),
                                                                      self.lengths.tolist())]


@torch.no_grad()
def target_responses(target, prompts: list[list[int]], max_new_tokens: int, eos, pad_id: int, partial=None,
                     batch_size: int = 32, progress: bool = True, inputs=None, temperature: float | None = None,
                     seed: int = 0) -> list[list[int]]:
    """The target's greedy response (or, with ``temperature``, a sampled one) to every prompt (token ids),
    ``max_new_tokens`` each or up to ``eos`` (None:
    EOS does not stop, as the benchmark suites decode). Prompts are batched by length (left padded, with the
    attention mask: the padded positions change nothing but rounding) so a CPU spends one forward per step on a
    whole batch; with ``partial`` each finished batch is saved and a later call goes on from the next.
    ``inputs(indices, ids)``: the other inputs of those prompts, laid out as ``ids`` (a VLM's ``pixel_values``).
    With ``temperature``, responses sampled from the target at that temperature instead (no top-k / top-p), each
    batch from its own seed (``seed`` + the batch's index), so a resumed call draws what an uninterrupted one does:
    the rows a drafter for sampling calls learns from (a root the target did not rank first, a sampled context)."""
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0 (None: greedy), got {temperature}")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    identity = {"prompts": hashlib.sha256(json.dumps(prompts).encode()).hexdigest(), "batch_size": batch_size,
                "max_new_tokens": max_new_tokens, "eos": eos}
    if temperature is not None:
        identity.update(temperature=float(temperature), seed=int(seed))
    saved = load_checkpoint(partial) if partial is not None else None
    if saved is not None and saved.get("identity") != identity:
        raise ValueError(f"partial responses {partial} were made for other prompts or settings; delete the file to "
                         "start over")
    done: dict[int, list[int]] = dict(saved["responses"]) if saved is not None else {}
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    todo = [(n, b) for n, b in enumerate(batches) if not all(i in done for i in b)]
    target.eval()
    how = dict(do_sample=False) if temperature is None else dict(do_sample=True, temperature=float(temperature),
                                                                   top_k=0, top_p=1.0)
    for n, group in tqdm(todo, desc="target responses", disable=not progress):
        width = max(len(prompts[i]) for i in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.long)
        for row, i in enumerate(group):
            ids[row, width - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[row, width - len(prompts[i]):] = 1
        more = on_model(inputs(group, ids), target) if inputs is not None else {}
        if temperature is not None:
            torch.manual_seed(int(seed) + n)
        out = target.generate(on_model(ids, target), attention_mask=on_model(mask, target), **how,
                              max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad_id, **more)
        for row, i in enumerate(group):
            new = out[row, width:].tolist()
            if eos is not None and eos in new:
                new = new[: new.index(eos) + 1]
            done[i] = new
        if partial is not None:
            save_checkpoint(partial, {"identity": identity, "responses": done})
    return [done[i] for i in range(len(prompts))]


def row_lengths(data) -> torch.LongTensor:
    return data.lengths if isinstance(data, Responses) else data.prefix + data.gen_len


def sample_anchors(data, idx: torch.LongTensor, m: int, gen: torch.Generator) -> torch.LongTensor:
    """[len(idx), m] anchor positions, uniform over each row's response with at least one token after them
    (positions prefix .. length − 2), drawn on the CPU from ``gen``."""
    span = (row_lengths(data)[idx] - data.prefix[idx] - 1)[:, None]
    u = torch.rand(len(idx), m, generator=gen)
    return data.prefix[idx][:, None] + torch.minimum((u * span).long(), span - 1)


def make_batch(data, idx: torch.LongTensor, anchors: torch.LongTensor,
               features: torch.Tensor | None = None, last: torch.Tensor | None = None) -> dict:
    """A training batch of rows ``idx``; with ``features`` (precomputed, [N, W, K·H]) it carries theirs, with ``last``
    ([N, W, H]) the target's last hidden states too (its distributions, for KL and the sampled selection)."""
    width = int(row_lengths(data)[idx].max())
    batch = {"tokens": data.tokens[idx, :width], "lengths": row_lengths(data)[idx], "anchors": anchors}
    if features is not None:
        batch["features"] = features[idx, :width]
    if last is not None:
        batch["target_last"] = last[idx, :width]
    return batch


def compressed(batch: dict, n: int, image_token_id: int | None) -> dict:
    """``batch`` with its pictures compressed to ``n`` entries each (0: as it is)."""
    if not n:
        return batch
    if image_token_id is None:
        raise ValueError("compressing pictures needs the target's image token id")
    return {**batch, "compress_to": int(n), "image": batch["tokens"] == image_token_id}


def slot_logits(net: DFlashDraftModel, target, batch: dict, features: torch.Tensor) -> torch.Tensor:
    """The batch's teacher-forced slot logits, ids the target never emits at −inf (its pictures compressed where the
    batch says so)."""
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    return emitted(teacher_forced_logits(net, embed, lm_head, batch["tokens"], features, batch["anchors"],
                                         batch.get("image"), batch.get("compress_to"), batch.get("block")).float(),
                   getattr(target, "disallowed", None))


@torch.no_grad()
def precompute_features(target, net: DFlashDraftModel | None, data, batch_size: int = 32, progress: bool = True,
                        select=None, inputs=None) -> torch.Tensor:
    """[N, W, F] float16 on the CPU: the target's features over every row, computed once (a training step then costs
    the drafter's forward and backward only; the target's forward over a row is what dominates a step on a CPU).
    The features are ``net``'s layers (``select_features``), or ``select(hidden_states)`` (e.g. the last layer's, what
    a feature drafter reads). ``inputs(rows, ids)``: the forward's other inputs for those rows, whose tokens are
    ``ids`` (a VLM's ``pixel_values``: the features over the image placeholders are what the picture makes them)."""
    select = select or net.select_features
    N, W = data.tokens.shape
    lengths = row_lengths(data)
    out = None
    for i in tqdm(range(0, N, batch_size), desc="target features", disable=not progress):
        idx = torch.arange(i, min(i + batch_size, N))
        width = int(lengths[idx].max())
        ids = data.tokens[idx, :width]
        more = on_model(inputs(idx.tolist(), ids), target) if inputs is not None else {}
        hidden = target(input_ids=on_model(ids, target), output_hidden_states=True, **more).hidden_states
        feats = select(hidden)
        if out is None:
            out = torch.zeros(N, W, feats.shape[-1], dtype=torch.float16)
        out[idx, :width] = feats.to("cpu", torch.float16)
    return out


@torch.no_grad()
def target_outputs(target, net: DFlashDraftModel, tokens: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(features [N, T, K·H] of the drafter's layers, target logits [N, T, V]) of right-padded rows (causal
    attention: padding after a row changes nothing before it)."""
    out = target(input_ids=tokens, output_hidden_states=True)
    return net.select_features(out.hidden_states), out.logits


def slot_labels(batch: dict, block_size: int) -> tuple[torch.LongTensor, torch.BoolTensor, torch.LongTensor]:
    """(labels [N, m, B−1], valid [N, m, B−1], label positions [N, m, B−1]): slot k of anchor a is the token at
    a + k, valid while inside the row."""
    tokens, lengths, anchors = batch["tokens"], batch["lengths"], batch["anchors"]
    k = torch.arange(1, block_size, device=tokens.device)
    pos = anchors[..., None] + k
    valid = pos < lengths[:, None, None]
    pos = pos.clamp(max=tokens.shape[1] - 1)
    N, m, _ = pos.shape
    labels = tokens.gather(1, pos.view(N, -1)).view(N, m, -1)
    return labels, valid, pos


def with_last_hidden(net: DFlashDraftModel):
    """A ``select`` for :func:`precompute_features`: the drafter's features and the target's last hidden state (its
    logits are ``lm_head`` of it: the stock models' last ``hidden_states`` entry is after the final norm) in one
    tensor; :func:`split_last` takes them apart."""
    return lambda hidden_states: torch.cat([net.select_features(hidden_states), hidden_states[-1]], dim=-1)


def split_last(both: torch.Tensor, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, last hidden states): views of a :func:`with_last_hidden` tensor."""
    return both[..., :-hidden_size], both[..., -hidden_size:]


def cached_target(target, net: DFlashDraftModel, data, with_last: bool, progress: bool):
    """(features, the target's last hidden states or None) of every row, computed once
    (:func:`precompute_features`): the last hidden states too where ``with_last``, in the same pass."""
    if not with_last:
        return precompute_features(target, net, data, progress=progress), None
    both = precompute_features(target, net, data, progress=progress, select=with_last_hidden(net))
    return split_last(both, target.get_output_embeddings().weight.shape[1])


def slot_target_logprobs(target, batch: dict, pos: torch.LongTensor, target_logits: torch.Tensor | None):
    """[N, m, k, V] float log-probabilities of the target's distribution of the token at each label position ``pos``
    [N, m, k] (from its logits one position earlier): ``target_logits`` [N, T, V] when the target ran online, else
    its LM head over the cached last hidden states at those positions only."""
    N, m, k = pos.shape
    at = (pos - 1).view(N, -1, 1)
    if target_logits is None:
        last = batch["target_last"]
        h = last.gather(1, at.expand(N, m * k, last.shape[-1]))
        lm_head = target.get_output_embeddings()
        logits = lm_head(h.to(lm_head.weight.dtype))
    else:
        logits = target_logits.gather(1, at.expand(N, m * k, target_logits.shape[-1]))
    logits = emitted(logits.float(), getattr(target, "disallowed", None))
    return torch.log_softmax(logits.view(N, m, k, -1), -1)


def slot_weights(block_size: int, gamma: float, device) -> torch.Tensor:
    return torch.exp(-torch.arange(block_size - 1, device=device, dtype=torch.float32) / gamma)


def batch_features(net: DFlashDraftModel, target, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the drafter's features, the target's logits or None) of a batch: its cached features (the target's
    distributions then come from its cached last hidden states, :func:`slot_target_logprobs`), else one target
    forward over its rows."""
    if "features" in batch:
        return batch["features"], None
    return target_outputs(target, net, batch["tokens"])


def dflash_loss(net: DFlashDraftModel, target, batch: dict, cfg: DFlashTrainConfig) -> torch.Tensor:
    if cfg.kl_weight > 0 and "features" in batch and "target_last" not in batch:
        raise ValueError("kl_weight > 0 needs the target's distributions: cache its last hidden states with the "
                         "features (train_dflash does) or train with cache_features=False")
    features, target_logits = batch_features(net, target, batch)
    logits = slot_logits(net, target, batch, features)
    block = check_block(net, batch.get("block"))
    labels, valid, pos = slot_labels(batch, block)
    w = slot_weights(block, cfg.gamma, logits.device)[None, None, :] * valid
    logq = torch.log_softmax(logits, -1)
    loss = -(logq.gather(-1, labels[..., None]).squeeze(-1) * w).sum() / w.sum()
    if cfg.kl_weight > 0:
        # the target's distribution of the token at position a + k comes from its logits at a + k − 1
        logp = slot_target_logprobs(target, batch, pos, target_logits)
        # (ids the target never emits: p = 0 there, and 0 · (−inf − …) is taken as 0)
        kl = torch.where(logp.isfinite(), logp.exp() * (logp - logq), 0.0).sum(-1)
        loss = loss + cfg.kl_weight * (kl * w).sum() / w.sum()
    return loss


@torch.no_grad()
def block_acceptance(net: DFlashDraftModel, target, batches: list[dict], sampled: bool = False) -> dict:
    """Held-out figures of greedy blocks: per-slot top-1 agreement with the target's token (teacher-forced:
    every slot given the true context) and the mean greedy accepted length of the whole block (leading slots
    that all agree: what a chain of the block gets accepted, the bonus token aside) and its distribution.
    ``sampled``: also each slot's overlap with the target's distribution, α = Σ min(p, q) at T = 1, and the expected
    accepted length of a chain of independent draws from the slots, Σ_k Π_{j≤k} α_j (``sampled_accepted_length``)."""
    net.eval()
    block = check_block(net, batches[0].get("block") if batches else None)  # (one length for all the batches)
    hits = torch.zeros(block - 1)
    counts = torch.zeros(block - 1)
    overlap = torch.zeros(block - 1)
    accepted, sampled_accepted, blocks = 0.0, 0.0, 0
    for batch in batches:
        batch = on_model(batch, net)
        features, target_logits = batch_features(net, target, batch)
        logits = slot_logits(net, target, batch, features)
        labels, valid, pos = slot_labels(batch, block)
        agree = (logits.argmax(-1) == labels) & valid
        hits += agree.sum((0, 1)).float().cpu()
        counts += valid.sum((0, 1)).float().cpu()
        run = agree.long().cumprod(-1).sum(-1)  # leading agreeing slots per block
        real = valid[..., 0]  # blocks with a label (a short row's spare anchors have none)
        accepted += float(run[real].sum())
        blocks += int(real.sum())
        if sampled:
            p = slot_target_logprobs(target, batch, pos, target_logits).exp()
            alpha = torch.minimum(p, torch.softmax(logits, -1)).sum(-1) * valid  # past a row's end: 0
            overlap += alpha.sum((0, 1)).float().cpu()
            sampled_accepted += float(alpha.cumprod(-1).sum(-1)[real].sum())
    out = {"slot_agreement": (hits / counts.clamp(min=1)).tolist(), "accepted_length": accepted / max(blocks, 1),
           "blocks": blocks}
    if sampled:
        out.update(slot_overlap=(overlap / counts.clamp(min=1)).tolist(),
                   sampled_accepted_length=sampled_accepted / max(blocks, 1))
    return out


def tau_of(stats) -> float:
    """τ of real decoding over several calls' stats: new tokens per target forward after each call's prefill."""
    new = steps = 0
    for st in stats:
        new += st.new_tokens
        steps += st.row_forwards - 1
    return new / max(steps, 1)


def validation_batches(val, cfg: DFlashTrainConfig, block_size: int, features: torch.Tensor | None = None,
                       last: torch.Tensor | None = None) -> list[dict]:
    """Fixed held-out blocks: every ``block_size // 2``-th response position of the first ``val_rows`` rows (with
    ``features``, the rows' precomputed ones: a VLM's rows need their pictures to be computed; with ``last`` the
    target's last hidden states, for the sampled figure)."""
    n = min(cfg.val_rows, len(val))
    step = max(1, block_size // 2)
    longest = int((row_lengths(val) - val.prefix).max())
    offsets = torch.arange(0, longest - 1, step)
    out = []
    for i in range(0, n, 32):
        idx = torch.arange(i, min(i + 32, n))
        # past a row's end an anchor has no label (not counted); kept inside the batch's width for the forward
        anchors = (val.prefix[idx][:, None] + offsets[None, :]).clamp(max=int(row_lengths(val)[idx].max()) - 1)
        out.append(make_batch(val, idx, anchors, features, last))
    return out


def train_dflash(net: DFlashDraftModel, target, train, val,
                 cfg: DFlashTrainConfig | None = None, progress: bool = True, checkpoint=None,
                 checkpoint_every_s: float = 120.0, features: torch.Tensor | None = None,
                 val_features: torch.Tensor | None = None, image_token_id: int | None = None) -> dict:
    """Train ``net`` against the frozen ``target`` (both on one device); returns the report (config, steps, tokens,
    seconds, held-out block figures before and after). ``checkpoint``: a file a killed run resumes from.
    ``features``: the training rows' precomputed features (:func:`precompute_features`); with
    ``cfg.cache_features`` and none given they are computed here. ``image_token_id``: the target's picture
    placeholder, which ``cfg.compress_choices`` needs."""
    cfg = cfg or DFlashTrainConfig()
    for n in cfg.block_choices:
        if n:
            check_block(net, n)
    for n in cfg.compress_choices:
        if n:
            net.check_compress(n)  # before any work
    if model_device(net) != model_device(target):
        raise ValueError(f"the drafter is on {model_device(net)} but the target on {model_device(target)}")
    for name, data in (("training", train), ("validation", val)):
        if len(data) == 0 or int((row_lengths(data) - data.prefix).min()) < 2:
            raise ValueError(f"{name} responses need at least 2 tokens each (a block needs a root and a label)")
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampled = cfg.select_by == "sampled"
    # the target's distributions: for KL (training rows) and for the sampled figure (held-out rows); with cached
    # features they come from its last hidden states, cached in the same pass
    wants_p = cfg.kl_weight > 0 or sampled
    if wants_p and (features is not None or val_features is not None):
        raise ValueError("KL and the sampled selection need the target's distributions beside its features: pass "
                         "no precomputed features (train_dflash caches both in one pass)")
    last = val_last = None
    if features is None and cfg.cache_features:
        features, last = cached_target(target, net, train, cfg.kl_weight > 0, progress)
    if wants_p and cfg.cache_features:
        val_features, val_last = cached_target(target, net, val, True, progress)
    if cfg.trainable:
        names = [n for n, _ in net.named_parameters() if n.startswith(tuple(cfg.trainable))]
        if not names:
            raise ValueError(f"trainable={cfg.trainable} names none of the drafter's parameters")
        for n, p in net.named_parameters():
            p.requires_grad_(n in names)
    settings = sorted(set(cfg.compress_choices)) or [0]
    plain_batches = validation_batches(val, cfg, net.block_size, val_features, val_last)
    val_batches = {n: [on_model(compressed(b, n, image_token_id), net) for b in plain_batches] for n in settings}
    before = block_acceptance(net, target, val_batches[settings[0]], sampled)

    def next_batch(step: int) -> dict:
        idx = torch.randint(0, len(train), (cfg.batch_size,), generator=gen)
        batch = make_batch(train, idx, sample_anchors(train, idx, cfg.anchors, gen), features, last)
        if cfg.block_choices:
            batch["block"] = draw(cfg.block_choices) or None
        if not cfg.compress_choices:
            return batch
        return compressed(batch, draw(cfg.compress_choices), image_token_id)

    def draw(choices: tuple[int, ...]) -> int:  # one of a step's settings, from the run's generator
        return choices[int(torch.randint(0, len(choices), (1,), generator=gen))]

    figure = "sampled_accepted_length" if sampled else "accepted_length"

    def val_loss() -> float:  # minimised: the negative held-out accepted length (mean over the settings)
        return -sum(block_acceptance(net, target, b, sampled)[figure] for b in val_batches.values()) / len(settings)

    t0 = time.perf_counter()
    res = train_loop(net, next_batch, val_loss, lambda model, b: dflash_loss(model, target, b, cfg),
                     max_steps=cfg.steps, budget_s=cfg.budget_s, lr=cfg.lr, warmup=cfg.warmup,
                     eval_every=cfg.eval_every, patience=cfg.patience, desc="train dflash", progress=progress,
                     checkpoint=checkpoint, checkpoint_every_s=checkpoint_every_s, generators=(gen,))
    for p in net.parameters():
        p.requires_grad_(True)
    after = block_acceptance(net, target, val_batches[settings[0]], sampled)
    by_block = {str(n or net.block_size): block_acceptance(net, target, [{**b, "block": n or None}
                                                                          for b in val_batches[settings[0]]])
                for n in sorted(set(cfg.block_choices))}
    width = float(row_lengths(train).float().mean())
    return {"config": asdict(cfg), "steps": res.steps, "seconds": res.seconds, "wall_seconds": time.perf_counter() - t0,
            "stopped": res.stopped, "rows_seen": res.steps * cfg.batch_size,
            "tokens_seen": int(res.steps * cfg.batch_size * width),
            "blocks_seen": res.steps * cfg.batch_size * cfg.anchors,
            "val_history": [(s, -v) for s, v in res.val_history], "best_accepted_length": -res.best_val_loss
            if math.isfinite(res.best_val_loss) else None,
            "heldout_before": before, "heldout_after": after,
            **({"heldout_after_by_setting": {str(n): block_acceptance(net, target, b) for n, b in val_batches.items()}}
               if cfg.compress_choices else {}),
            **({"heldout_after_by_block": by_block} if cfg.block_choices else {})}


__all__ = ["Responses", "target_responses", "row_lengths", "DFlashTrainConfig", "dflash_loss", "precompute_features", "target_outputs", "block_acceptance", "train_dflash", "sample_anchors", "make_batch", "compressed", "slot_logits",
           "validation_batches", "batch_features", "cached_target", "with_last_hidden", "split_last",
           "slot_target_logprobs"]
