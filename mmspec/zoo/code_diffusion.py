"""Diffusion drafters of the code family, built on top of ``code-target`` and ``code-drafter``:

- a 2-layer masked diffusion LM over the code tokenizer (mask id 2): a stock ``LlamaForCausalLM`` run with
  bidirectional attention, Dream convention (position i predicts i+1), grown from the 1-layer AR drafter
  (Dream-style adaptation of an AR model, as Dream starts from Qwen2.5) and trained with the MDLM objective
  (t ~ U(0, 1), masked-token cross-entropy weighted 1/t) on the training modules: the generic starting point;
- ``code-dlm`` (DiffuSpec's drafter): the starting point trained on with MDLM on the target's own greedy
  generations (:mod:`mmspec.zoo.code_distill`);
- ``code-deer-s1`` / ``code-deer``: the starting point aligned to ``code-target`` by DEER Stage I, then Stages
  I+II (:mod:`mmspec.training.deer`), with the paper's hard labels on the same generations and blocks up to 16;
  τ of DEER decoding on held-out validation prompts is recorded at the start and after each stage;
- ``code-ngram``: the token n-gram model DiffuSpec's causal path search uses as its causal proxy.

Each drafter's forward costs a fraction of the 16-layer target's (see the sizes below); every stage
checkpoints under ``<home>/.build/`` and resumes.

Devices: the target and the dLM are trained and measured on :func:`~mmspec.zoo.common.build_device` (the dLM
grown on the CPU from ``code-drafter``, as always, then moved); windows, rows and the MDLM masks are drawn on
the CPU and moved to the model where they meet it; ``zoo.json`` checksums are computed on the CPU.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..drafters import DEERDrafter, DiffusionLM
from ..drafters.ngram import NGramLM
from ..training import deer
from ..training.dlm import mdlm_loss
from ..training.loop import model_device, on_model, train_loop
from . import code_distill
from .code_data import ensure_tokenizer, load_corpus
from .code_loader import DIFFUSION_NAMES as NAMES
from .code_loader import load
from .common import build_device, build_dir, logits_checksum, seed_everything, versions
from .entry import ZooEntry
from .growth import grow_depth
from .home import write_json
from .streams import batches, fixed_windows, token_stream

SEED = 777
MASK_ID = 2
CONVENTION = "dream"
DLM_LAYERS = 2  # measured forward over 17 slots: 4.3 ms against the target's 29.9 ms over 17 (1 thread)
DLM_SEQ_LEN = 256
# sized for 2 CPU cores (a 2-layer x 192 step at batch 32 x 256 took 4.7 s with the machine shared with another
# training, so about a quarter of that is expected at batch 16 alone); a GPU build ran 4000 / 4000 / 8000 / 3000
# steps at batch 32
DLM_BASE_STEPS, DLM_STEPS, DLM_BUDGET_S = 2000, 2500, 4 * 3600.0
DLM_BATCH = 16
DEER_K_MAX = 16  # longest block trained for (Stage I) and R_max of Stage II
DEER_STAGE1_STEPS, DEER_STAGE2_STEPS = 4000, 1500  # on the 16k target continuations (code_distill.FULL)
DEER_BLOCKS = (8, 16)  # τ is recorded at these block lengths
# stages select their weights on held-out accepted length (deer.DEERConfig.select), evaluated every 250 steps, and
# stop after 6 evaluations without a gain: the first 65k-row build, selecting on loss every 100 steps with patience
# 3 (code-dlm 4), stopped Stage I at 800 of 8000 steps and code-dlm at 500 of 4000, just after the learning-rate
# warm-up that starts each stage had raised the validation loss (DEER tau +19% instead of +30%)
DEER_EVAL_EVERY, DEER_PATIENCE = 250, 6
SELECT_CFG = deer.DEERConfig(convention=CONVENTION, pattern="cache")  # how code-dlm's accepted runs are measured
NGRAM_ORDER, NGRAM_MIN_COUNT = 4, 3  # 3.48 nats/token held out, 8.8 MB (order 3: 3.66)


def checksum_input(tok) -> torch.Tensor:
    ids = tok("def add(a, b):\n    return", return_tensors="pt", add_special_tokens=False).input_ids
    return torch.cat([ids, torch.full((1, 4), MASK_ID)], dim=1)


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    if entry.name == "code-ngram":
        ctx = [int(t) for t in checksum_input(entry.tokenizer)[0, :-4]]
        return logits_checksum(entry.model.log_probs(ctx))
    ids = checksum_input(entry.tokenizer).to(model_device(entry.model))
    mask = torch.ones(1, 1, ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device)
    return logits_checksum(entry.model(input_ids=ids, attention_mask=mask).logits)


def _save(model, tok, path: Path, info: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(path, safe_serialization=True)
    model.float()
    tok.save_pretrained(path)
    entry = ZooEntry(path.name, LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), tok)
    info["checksum"] = checksum(entry)
    write_json(path / "zoo.json", info)


def _streams(tok, micro: bool):
    corpus = load_corpus(micro=micro)
    return corpus, {s: token_stream(tok, corpus.texts(s)) for s in ("train", "val", "test")}


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    home = Path(home)
    names = names or NAMES
    tok = ensure_tokenizer(home, micro)
    corpus, streams = _streams(tok, micro)
    results = {}
    common = {"family": "code", "micro": micro, "mask_token_id": MASK_ID, "convention": CONVENTION,
              "attention": "bidirectional (4-D mask)", **versions()}

    if "code-ngram" in names:
        t0 = time.perf_counter()
        ids = tok(corpus.texts("train"), add_special_tokens=False).input_ids
        lm = NGramLM.fit(ids, vocab_size=len(tok), order=NGRAM_ORDER, min_count=1 if micro else NGRAM_MIN_COUNT)
        path = home / "code-ngram"
        lm.save(path)
        tok.save_pretrained(path)
        test_ids = tok(corpus.texts("test"), add_special_tokens=False).input_ids
        metrics = {"order": NGRAM_ORDER, "min_count": lm.min_count, "entries": lm.num_entries,
                   "heldout_perplexity": lm.perplexity(test_ids), "fit_seconds": time.perf_counter() - t0}
        metrics["heldout_nats_per_token"] = float(torch.tensor(metrics["heldout_perplexity"]).log())
        entry = ZooEntry("code-ngram", lm, tok)
        write_json(path / "zoo.json", {**common, "name": "code-ngram", "checksum": checksum(entry)})
        write_json(path / "metrics.json", metrics)
        results["code-ngram"] = metrics

    target = load("code-target", home / "code-target").model.to(build_device())
    wanted = [n for n in ("code-dlm", "code-deer-s1", "code-deer") if n in names]
    if wanted:
        results.update(_build_dlms(home, tok, target, streams, micro, progress, common, wanted))
    return results


def _dlm_tau(target, dlm_model, prompts, micro: bool, block: int) -> float:
    dlm_model.eval()
    vocab = target.config.vocab_size
    return code_distill.decode_tau(target, lambda: DEERDrafter(DiffusionLM(dlm_model, MASK_ID, convention=CONVENTION,
                                                              target_vocab_size=vocab), num_tokens=block),
                      prompts, micro)


def _row_windows(data, batch: int, gen: torch.Generator):
    """MDLM batches from target generations: each row's last L tokens (L = the shortest row drawn), so every
    window holds a whole target continuation and no padding."""
    lengths = data.prefix + data.gen_len

    def take(idx: torch.Tensor) -> torch.Tensor:
        L = int(lengths[idx].min())
        start = lengths[idx] - L
        return torch.stack([data.tokens[i, s: s + L] for i, s in zip(idx.tolist(), start.tolist())])

    return take, (lambda step: take(torch.randint(0, len(data), (batch,), generator=gen)))


def _select_k(micro: bool) -> int:
    """The block length the DEER stages train for and the dLM stages are selected at."""
    return 8 if micro else DEER_K_MAX


def _mdlm_stage(model, next_batch, val_windows: list[torch.Tensor], g: torch.Generator, *, steps: int, lr: float,
                desc: str, checkpoint: Path, micro: bool, progress: bool, accepted_on=None):
    """One MDLM stage. With ``accepted_on`` (held-out target generations) the kept weights are those with the
    longest greedy-accepted block (k = DEER_K_MAX, the drafter's KV-cached pattern), as in the DEER stages;
    otherwise the lowest MDLM loss on ``val_windows``."""
    if accepted_on is not None:
        val_loss = deer.accepted_selector(model, accepted_on, _select_k(micro), MASK_ID, SELECT_CFG)
        every, patience = DEER_EVAL_EVERY, DEER_PATIENCE
    else:
        vg = torch.Generator()  # a CPU generator: mdlm_loss draws its masks on the CPU, then moves them
        val_windows = on_model(val_windows, model)  # once, not at every evaluation

        @torch.no_grad()
        def val_loss() -> float:
            vg.manual_seed(0)  # the same masks every evaluation
            return float(sum(mdlm_loss(model, w, MASK_ID, CONVENTION, vg) for w in val_windows) / len(val_windows))

        every, patience = 100, 4
    if micro:
        every, patience = 10, 4
    return train_loop(model, next_batch, val_loss, lambda m, b: mdlm_loss(m, b, MASK_ID, CONVENTION, g),
                      max_steps=steps, budget_s=6.0 if micro else DLM_BUDGET_S, lr=lr, warmup=5 if micro else 50,
                      eval_every=every, patience=patience, desc=desc, progress=progress, checkpoint=checkpoint,
                      generators=(g,))


def _build_dlms(home: Path, tok, target, streams: dict, micro: bool, progress: bool, common: dict,
                names: list[str]) -> dict:
    """The small diffusion drafters: a 2-layer dLM grown from ``code-drafter`` (Dream-style adaptation of an AR
    model) and trained with MDLM on the corpus (the generic starting point), then

    * ``code-dlm`` (DiffuSpec's drafter): MDLM on the target's own generations;
    * ``code-deer-s1`` / ``code-deer``: DEER Stage I, then Stage II, from the starting point, on the same
      generations with the paper's hard labels (the target's tokens).

    τ of DEER drafting on held-out validation prompts is recorded at the starting point and after each stage."""
    t0 = time.perf_counter()
    train, val = code_distill.target_data(home, target, streams, micro, progress)
    prompts = code_distill.tau_prompts(tok, micro)
    seq_len = 64 if micro else DLM_SEQ_LEN
    drafter = load("code-drafter", home / "code-drafter").model
    dlm_cfg = LlamaConfig(**{**drafter.config.to_dict(), "num_hidden_layers": DLM_LAYERS})
    g = seed_everything(SEED)
    model = grow_depth(drafter, dlm_cfg).to(build_device())  # grown on the CPU (same init draws), trained there
    corpus_val = [w[:, :seq_len] for w in fixed_windows(streams["val"], 8 if micro else 32, seq_len).split(8)]
    windows = batches(streams["train"], 4 if micro else DLM_BATCH, seq_len, g)
    base = _mdlm_stage(model, lambda step: next(windows)[:, :seq_len], corpus_val, g,
                       steps=20 if micro else DLM_BASE_STEPS, lr=1e-3 if micro else 1e-3, desc="train dlm (corpus)",
                       checkpoint=build_dir(home, "code-dlm") / "base.pt", micro=micro, progress=progress)
    start_state = {k: v.clone() for k, v in model.state_dict().items()}
    blocks = (4, 8) if micro else DEER_BLOCKS
    tau = {"start": {k: _dlm_tau(target, model, prompts, micro, k) for k in blocks}}
    out = {}
    start = {"steps": base.steps, "seconds": base.seconds, "best_val_loss": base.best_val_loss,
             "val_history": base.val_history, "objective": "MDLM on the training modules",
             "initialised_from": "code-drafter (grown to 2 layers, zero output projections in the new layer)"}

    if "code-dlm" in names:
        g2 = torch.Generator().manual_seed(SEED + 1)
        take, next_rows = _row_windows(train, 4 if micro else DLM_BATCH, g2)
        val_rows = [take(torch.arange(i, min(i + 16, len(val)))) for i in range(0, len(val), 16)]
        res = _mdlm_stage(model, next_rows, val_rows, g2, steps=20 if micro else DLM_STEPS, lr=1e-3 if micro else 5e-4,
                          desc="train code-dlm (target generations)", checkpoint=build_dir(home, "code-dlm") / "train.pt",
                          micro=micro, progress=progress, accepted_on=val)
        path = home / "code-dlm"
        _save(model, tok, path, {**common, "name": "code-dlm", "seed": SEED, "layers": DLM_LAYERS,
                                 "objective": "MDLM (t~U(0,1), masked CE weighted 1/t): corpus, then target generations"})
        metrics = {"start": start, "steps": res.steps, "train_seconds": res.seconds, "stopped": res.stopped,
                   **deer.accepted_record(res, _select_k(micro)), "params": sum(p.numel() for p in model.parameters()),
                   "tau_deer": {**tau, "after": {k: _dlm_tau(target, model, prompts, micro, k) for k in blocks}}}
        write_json(path / "metrics.json", metrics)
        out["code-dlm"] = metrics

    if "code-deer" in names or "code-deer-s1" in names:
        model.load_state_dict(start_state)
        cfg = dataclasses.replace(code_distill.data_config(micro))
        cfg.k_max = cfg.r_max = _select_k(micro)
        cfg.distill, cfg.clean_weight, cfg.lr = False, 0.5, (1e-3 if micro else 5e-4)
        cfg.batch_size = 4 if micro else DLM_BATCH
        cfg.stage1_steps, cfg.stage2_steps = (8, 6) if micro else (DEER_STAGE1_STEPS, DEER_STAGE2_STEPS)
        cfg.stage1_budget_s = cfg.stage2_budget_s = 6.0 if micro else DLM_BUDGET_S
        cfg.eval_every, cfg.patience = (4, 3) if micro else (DEER_EVAL_EVERY, DEER_PATIENCE)
        report = {"config": dataclasses.asdict(cfg), "start": start, "tau": tau,
                  "agreement": {"start": {k: deer.agreement(model, val, k, MASK_ID, cfg) for k in blocks}}}
        for stage in (1, 2):
            res = deer.train_stage(model, stage, train, val, MASK_ID, cfg, progress,
                                   checkpoint=build_dir(home, "code-deer") / f"stage{stage}.pt")
            report[f"stage{stage}"] = deer.stage_report(res, cfg)
            report["agreement"][f"after_stage{stage}"] = {k: deer.agreement(model, val, k, MASK_ID, cfg) for k in blocks}
            tau[f"after_stage{stage}"] = {k: _dlm_tau(target, model, prompts, micro, k) for k in blocks}
            name = "code-deer-s1" if stage == 1 else "code-deer"
            _save(model, tok, home / name, {**common, "name": name, "aligned_to": "code-target", "layers": DLM_LAYERS,
                                            "from": "the MDLM starting point (see metrics.json start)",
                                            "stages": list(range(1, stage + 1)), "attention_pattern": cfg.pattern})
        best = max(blocks, key=lambda k: tau["after_stage2"][k])
        report["tau_gain_stages_1_2"] = tau["after_stage2"][best] / tau["start"][best] - 1.0
        report["params"] = sum(p.numel() for p in model.parameters())
        report["wall_seconds"] = time.perf_counter() - t0
        for name in ("code-deer-s1", "code-deer"):
            if name in names:
                write_json(home / name / "metrics.json", report)
                out[name] = report
    return out


__all__ = ["NAMES", "build", "checksum", "MASK_ID", "CONVENTION"]
