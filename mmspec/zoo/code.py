"""Code family of the zoo: a Llama-architecture code LM (target) and a small AR drafter, trained on
the standard library's training modules; quality measured on held-out modules.

Devices (``mmspec zoo build --device``): every model is created on the CPU as always (the same initial
weights), then trained and measured on :func:`~mmspec.zoo.common.build_device`; models loaded from disk go
there too. Data (token streams, windows, prompts, distillation rows) stays CPU-made and is moved to a model's
device where it meets the model; the checksums in ``zoo.json`` are computed on the CPU."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..drafters import AutoregressiveDrafter
from ..training.logits import logits_at
from ..training.loop import load_checkpoint, model_device, on_model, save_checkpoint, train_loop
from . import code_dflash, code_diffusion, code_distill, code_eagle
from .code_data import CodeCorpus, completion_prompts, ensure_tokenizer, extra_training_files, load_corpus, read_texts
from .code_loader import BASE_NAMES, NAMES, load
from .common import build_device, build_dir, logits_checksum, seed_everything, versions
from .entry import ZooEntry
from .growth import grow_depth, layer_ablation, prune_unused, unused_layers
from .home import write_json
from .streams import batches, fixed_windows, mean_loss, next_token_loss, token_stream

SEED = 1234
CHECKSUM_TEXT = "def add(a, b):\n    return"

SIZES = {
    # name: (hidden, layers, heads, kv_heads, intermediate)
    "code-target": (256, 16, 4, 2, 704),  # the trained depth; layers that end unused are dropped (prune_unused)
    "code-target-base": (256, 4, 4, 2, 704),  # stage 1 of code-target (see GROWTH_COPIES)
    "code-drafter": (192, 1, 3, 1, 512),  # measured decode step 1.4 ms against the target's 15.4 ms (1 thread)
}
MICRO_SIZES = {"code-target": (64, 4, 2, 1, 128), "code-target-base": (64, 2, 2, 1, 128),
               "code-drafter": (32, 1, 2, 1, 64)}
# code-target trains in two stages, each checkpointed under <home>/.build/code-target/ (base.pt, grow.pt) so an
# interrupted build resumes where it stopped: a 4-layer base on the standard library's training split, then the
# 16-layer model grown from it (growth.grow_depth, mode "split", base layer i copied GROWTH_COPIES[i] times) and
# trained on that split mixed with the installed packages' sources (code_data.EXTRA_PACKAGES; STDLIB_ROWS of
# every BATCH rows come from the standard library). Fixed step counts keep rebuilds deterministic; the time
# budgets are only a safety net (a build stopped by its budget says so in metrics.json). On 2 CPU cores a step
# costs about 1.6 s (base) and 3.3-4.3 s (16 layers).
# Recipe history, all measured on held-out standard-library modules:
# (1) growth with zeroed copies on the standard library alone (3.2M tokens): all 12 grown layers unused
#     (ablation <= 0.001 nats; docs/figures/code-target-grown-attempt1.metrics.json), validation rising at LR 1e-3;
# (2) split copies, four of each base layer, on the widened corpus, 3000 + 3000 steps: held-out 2.65 nats, parse
#     rate 70%, but the three copies of base layer 0 stayed unused (ablation 0.002-0.004 nats);
# (3) the full depth from scratch, 6000 steps (GPU): 2.62 nats, every layer in use, but parse rate 42.9% (31 of
#     42 greedy completions fell into repetition loops), below the 4-layer model's 52.5%.
# Hence (4): recipe 2 with base layer 0 kept single and its three copies given to layers 1-3: held-out 2.64 nats,
#     parse rate 52.5%, every layer in use but one (layer 9, a copy of base layer 2: ablation 0.006 nats on 8 test
#     windows, 0.009 on 32), so the build then drops the layers skipping costs nothing (growth.prune_unused, on
#     validation windows): 15 layers, 2.65 nats, parse rate 65% in a probe on the same weights.
GROWTH_COPIES, MICRO_GROWTH_COPIES = (1, 5, 5, 5), (1, 3)
MAX_STEPS = {"code-target-base": 3000, "code-target": 3000, "code-drafter": 4000}
BUDGET_S = {"code-target-base": 3 * 3600.0, "code-target": 12 * 3600.0, "code-drafter": 4 * 3600.0}
LR = {"code-target-base": 2e-3, "code-target": 1e-3, "code-drafter": 2e-3}
WEIGHT_DECAY = {"code-target-base": 0.01, "code-target": 0.1}
WARMUP = {"code-target-base": 100, "code-target": 200}
TARGET_EVAL_EVERY = 250
STDLIB_ROWS = 6
DRAFTER_BATCH = 16  # rows of target generations per step: 4000 steps are 4 passes over code_distill.FULL's 16k
MICRO_BUDGET_S = 6.0
SEQ_LEN, BATCH = 256, 16


def model_config(name: str, vocab_size: int, micro: bool) -> LlamaConfig:
    hidden, layers, heads, kv, inter = (MICRO_SIZES if micro else SIZES)[name]
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=2048,
                       pad_token_id=0, eos_token_id=1, bos_token_id=None, tie_word_embeddings=False)


def function_body(completion: str) -> str:
    """The generated body: up to the first non-indented line (the function has ended)."""
    lines = completion.split("\n")
    body = []
    for line in lines:
        if line.strip() and not line[0].isspace():
            return "\n".join(body) + "\n"
        body.append(line)
    # ran out of budget mid-function: drop the last, possibly cut, line
    return "\n".join(body[:-1]) + "\n"


def distinct_2(token_lists: list[list[int]]) -> float:
    bigrams = [tuple(t[i: i + 2]) for t in token_lists for i in range(len(t) - 1)]
    return len(set(bigrams)) / max(1, len(bigrams))


@torch.no_grad()
def completion_quality(model, tok, corpus: CodeCorpus, limit: int, max_new_tokens: int) -> dict:
    prompts = completion_prompts(corpus, "test", limit=limit)
    parses, generated = 0, []
    device = model_device(model)
    for p in prompts:
        ids = tok(p.prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
        out = model.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0,
                             eos_token_id=tok.eos_token_id)
        new = out[0, ids.shape[1]:].tolist()
        generated.append(new)
        text = tok.decode(new, skip_special_tokens=True)
        body = function_body(text)
        statements = [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        try:
            ast.parse(p.prompt + body)
            parses += bool(statements)  # an empty body would parse after a docstring: not a completion
        except SyntaxError:
            pass
    return {"completion_prompts": len(prompts), "parse_rate": parses / max(1, len(prompts)),
            "distinct_2": distinct_2(generated), "completion_max_new_tokens": max_new_tokens}


def checksum_input(tok) -> torch.Tensor:
    return tok(CHECKSUM_TEXT, return_tensors="pt", add_special_tokens=False).input_ids


def save(model: LlamaForCausalLM, tok, path: Path, info: dict) -> None:
    """fp16 safetensors + tokenizer + zoo.json with the logits checksum of the shipped weights."""
    path.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    loaded = ZooEntry(name=path.name, model=LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval(),
                      tokenizer=tok)
    info["checksum"] = checksum(loaded)
    write_json(path / "zoo.json", info)


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    """Train the family's models (all, or ``names``); the drafter distils from the target, which is
    trained in the same run or loaded from ``home``."""
    home = Path(home)
    names = names or NAMES
    results = _build_base(home, micro, progress, [n for n in BASE_NAMES if n in names])
    extra = [n for n in code_diffusion.NAMES if n in names]
    if extra:
        results.update(code_diffusion.build(home, micro, progress, extra))
    if "code-dflash" in names:
        results.update(code_dflash.build(home, micro, progress, ["code-dflash"]))
    if "code-eagle" in names:
        results.update(code_eagle.build(home, micro, progress, ["code-eagle"]))
    return results


def _build_base(home: Path, micro: bool, progress: bool, names: list[str]) -> dict:
    if not names:
        return {}
    tok = ensure_tokenizer(home, micro)
    corpus = load_corpus(micro=micro)
    train = token_stream(tok, corpus.texts("train"))
    val = token_stream(tok, corpus.texts("val"))
    test = token_stream(tok, corpus.texts("test"))
    seq_len = 64 if micro else SEQ_LEN
    val_windows = fixed_windows(val, 8 if micro else 48, seq_len)
    test_windows = fixed_windows(test, 8 if micro else 96, seq_len)
    results = {}
    teacher = None
    batch = 4 if micro else BATCH
    for name in names:
        t0 = time.perf_counter()
        stages = {}
        if name == "code-target":
            model, stages, extra_info = _train_deep_target(home, tok, train, val_windows, micro, progress)
            res = stages["grow"]
        else:
            teacher = teacher if teacher is not None else _load_on_build_device("code-target", home)
            model, res, stages = _train_drafter(home, tok, teacher, {"train": train, "val": val}, micro, progress)
        info = {"family": "code", "name": name, "micro": micro, "seed": SEED + NAMES.index(name),
                "seq_len": seq_len, **versions()}
        if name == "code-drafter":
            info["distilled_from"] = "code-target"
        save(model, tok, home / name, info)
        shipped = _load_on_build_device(name, home)  # metrics are measured on the shipped (fp16) weights
        if name == "code-target":
            teacher = shipped
        metrics = {
            "layers": shipped.config.num_hidden_layers, "hidden": shipped.config.hidden_size,
            "params": sum(p.numel() for p in shipped.parameters()),
            "train_tokens": int(train.numel()), "val_tokens": int(val.numel()), "test_tokens": int(test.numel()),
            "train_files": len(corpus.files["train"]), "val_files": len(corpus.files["val"]),
            "test_files": len(corpus.files["test"]),
            "heldout_loss_nats_per_token": mean_loss(shipped, test_windows),
            "best_val_loss": res.best_val_loss, "steps": res.steps, "train_seconds": res.seconds,
            "stopped": res.stopped, "tokens_seen": res.steps * batch * seq_len,
            "val_history": res.val_history,
        }
        if name == "code-drafter":
            metrics.update(stages)
            stages = {}
        if stages:
            metrics["stages"] = {k: {"steps": r.steps, "tokens": r.steps * batch * seq_len, "seconds": r.seconds,
                                     "best_val_loss": r.best_val_loss, "stopped": r.stopped,
                                     "val_history": r.val_history, **({"note": r.note} if r.note else {})}
                                 for k, r in stages.items()}
            metrics["steps"] = sum(r.steps for r in stages.values())
            metrics["tokens_seen"] = metrics["steps"] * batch * seq_len
            metrics["train_seconds"] = sum(r.seconds for r in stages.values())
            ablation_windows = test_windows[: 4 if micro else 8]
            metrics["layer_ablation_loss_increase"] = layer_ablation(shipped, ablation_windows)
            metrics["layer_ablation_base_loss"] = mean_loss(shipped, ablation_windows)
            metrics["unused_layers"] = unused_layers(metrics["layer_ablation_loss_increase"],
                                                     metrics["layer_ablation_base_loss"])
            metrics.update(extra_info)
            metrics["stdlib_rows_per_batch"] = 2 if micro else STDLIB_ROWS
        metrics.update(completion_quality(shipped, tok, corpus, limit=4 if micro else 40,
                                          max_new_tokens=16 if micro else 128))
        metrics["wall_seconds"] = time.perf_counter() - t0
        write_json(home / name / "metrics.json", metrics)
        results[name] = metrics
    return results


def _load_on_build_device(name: str, home: Path) -> LlamaForCausalLM:
    """A model of this build, loaded from ``home`` (float32, as the zoo loads it) and moved to the build's
    device: the teacher of the drafters and the shipped weights the metrics are measured on."""
    return load(name, home / name).model.to(build_device())


def generation_loss(model, batch: dict) -> torch.Tensor:
    """The AR drafter's objective on target generations: next-token cross-entropy on the target's greedy
    continuation (its tokens are the target's argmax, the very thing greedy verification checks), plus a
    quarter-weight term on the corpus prefix so the drafter stays a language model of the prompt's text. The LM
    head runs on the rows' real tokens only, not on their right padding."""
    tokens, cont, rows = batch["tokens"], batch["continuation"], batch["rows"]
    read = rows[:, 1:]  # position j predicts token j + 1
    logits = logits_at(model, read, input_ids=tokens[:, :-1]).float()
    ce = torch.nn.functional.cross_entropy(logits, tokens[:, 1:][read], reduction="none")
    on_cont = cont[:, 1:][read]
    on_prefix = ~on_cont
    return (ce * on_cont).sum() / on_cont.sum().clamp(min=1) + 0.25 * (ce * on_prefix).sum() / on_prefix.sum().clamp(min=1)


def _generation_batches(data, batch: int, gen: torch.Generator):
    cont, rows = code_distill.continuation_mask(data), code_distill.row_mask(data)
    width = int(rows.sum(1).max())

    def take(idx: torch.Tensor) -> dict:
        return {"tokens": data.tokens[idx, :width], "continuation": cont[idx, :width], "rows": rows[idx, :width]}

    return take, (lambda step: take(torch.randint(0, len(data), (batch,), generator=gen)))


def _train_drafter(home: Path, tok, target: LlamaForCausalLM, streams: dict, micro: bool, progress: bool):
    """code-drafter: a 1-layer AR model trained on the target's own greedy continuations (sequence-level
    distillation); its τ on held-out validation prompts is recorded before training (random weights) and after."""
    train, val = code_distill.target_data(home, target, streams, micro, progress)
    prompts = code_distill.tau_prompts(tok, micro)
    gen = seed_everything(SEED + NAMES.index("code-drafter"))
    model = LlamaForCausalLM(model_config("code-drafter", len(tok), micro)).to(build_device())

    def tau() -> float:
        model.eval()
        return code_distill.decode_tau(target, lambda: AutoregressiveDrafter(model, num_tokens=4), prompts, micro)

    before = tau()
    take, next_batch = _generation_batches(train, 8 if micro else DRAFTER_BATCH, gen)
    # CPU-made like the training batches, moved to the model's device once (evaluated every eval_every steps)
    val_batches = [on_model(take(torch.arange(i, min(i + 32, len(val)))), model)
                   for i in range(0, len(val), 32)]

    @torch.no_grad()
    def val_loss() -> float:
        losses = [generation_loss(model, b) for b in val_batches]  # all queued before the first read-back
        return sum(float(x) for x in losses) / len(val_batches)

    res = train_loop(model, next_batch, val_loss, generation_loss, max_steps=30 if micro else MAX_STEPS["code-drafter"],
                     budget_s=MICRO_BUDGET_S if micro else BUDGET_S["code-drafter"], lr=3e-3 if micro else LR["code-drafter"],
                     warmup=5 if micro else 200, eval_every=10 if micro else 250, patience=4, desc="train code-drafter",
                     progress=progress, checkpoint=build_dir(home, "code-drafter") / "train.pt", generators=(gen,))
    width = take(torch.arange(1))["tokens"].shape[1]
    return model, res, {"tau_chain4_before": before, "tau_chain4_after": tau(),
                        "tokens_seen": res.steps * (8 if micro else DRAFTER_BATCH) * width,
                        "distillation_rows": len(train), "distillation_tokens": int(len(train) * train.gen_len)}


def extra_stream(home: Path, tok, micro: bool) -> tuple[torch.Tensor, dict]:
    """Token stream of the installed packages' sources (:func:`code_data.extra_training_files`), cached in
    ``.build/code-target/extra-tokens.pt``, and what it holds (files, tokens, package versions)."""
    cache = build_dir(home, "code-target") / ("extra-tokens-micro.pt" if micro else "extra-tokens.pt")
    saved = load_checkpoint(cache)
    if saved is not None:
        return saved["tokens"], saved["info"]
    files, versions = extra_training_files()
    files = files[:20] if micro else files
    stream = token_stream(tok, read_texts(files))
    info = {"extra_files": len(files), "extra_tokens": int(stream.numel()), "extra_packages": versions}
    save_checkpoint(cache, {"tokens": stream, "info": info})
    return stream, info


def mixed_batches(stdlib: torch.Tensor, extra: torch.Tensor, batch: int, stdlib_rows: int, seq_len: int,
                  gen: torch.Generator):
    """Endless batches with ``stdlib_rows`` windows from the standard library and the rest from ``extra``."""
    a = batches(stdlib, stdlib_rows, seq_len, gen)
    b = batches(extra, batch - stdlib_rows, seq_len, gen)
    while True:
        yield torch.cat([next(a), next(b)])


def _train_deep_target(home: Path, tok, train: torch.Tensor, val_windows: torch.Tensor, micro: bool,
                       progress: bool) -> tuple[LlamaForCausalLM, dict, dict]:
    """code-target in two checkpointed stages: a shallow base trained from scratch on the standard library, then
    the model grown to full depth (:func:`grow_depth`, mode "split", ``GROWTH_COPIES``) and trained on the
    standard library mixed with the packages' sources. Returns (model, {"base": result, "grow": result}, corpus
    info). Growing from a trained base reaches a better held-out loss in far fewer CPU hours than training the
    deep model from scratch, and its greedy completions parse more often (recipe history above)."""
    seq_len = 64 if micro else SEQ_LEN
    batch = 4 if micro else BATCH
    extra, extra_info = extra_stream(home, tok, micro)
    copies = MICRO_GROWTH_COPIES if micro else GROWTH_COPIES
    stages = {}
    for stage, key in (("base", "code-target-base"), ("grow", "code-target")):
        gen = seed_everything(SEED + (0 if stage == "base" else 17))
        if stage == "base":
            model = LlamaForCausalLM(model_config(key, len(tok), micro)).to(build_device())
            stream = batches(train, batch, seq_len, gen)
        else:  # on the base's device (grow_depth creates the deep model on the CPU, then moves it)
            model = grow_depth(model, model_config(key, len(tok), micro), mode="split",
                               copies=copies)
            stream = mixed_batches(train, extra, batch, 2 if micro else STDLIB_ROWS, seq_len, gen)
        stages[stage] = train_loop(
            model, lambda step: next(stream), lambda: mean_loss(model, val_windows), next_token_loss,
            max_steps=30 if micro else MAX_STEPS[key], budget_s=MICRO_BUDGET_S if micro else BUDGET_S[key],
            lr=3e-3 if micro else LR[key], warmup=5 if micro else WARMUP[key],
            eval_every=10 if micro else TARGET_EVAL_EVERY, weight_decay=WEIGHT_DECAY[key],
            patience=4 if stage == "grow" else 3,
            desc=f"train code-target ({stage}, {model.config.num_hidden_layers} layers)", progress=progress,
            checkpoint=build_dir(home, "code-target") / f"{stage}.pt", generators=(gen,))
    # the trained layers a sibling copy made redundant are dropped (decided on validation windows, so the held-out
    # metrics below stay unseen): the shipped target has only layers that skipping would cost
    model, pruned = prune_unused(model.eval(), val_windows)
    extra_info = {**extra_info, "growth": {"mode": "split", "copies": list(copies), "trained_layers": sum(copies),
                                           "pruned": pruned}}
    return model, stages, extra_info


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    """Recompute the fingerprint recorded in zoo.json (logits of a fixed input)."""
    if entry.name in code_diffusion.NAMES:
        return code_diffusion.checksum(entry)
    if entry.name in code_dflash.NAMES:
        return code_dflash.checksum(entry)
    if entry.name in code_eagle.NAMES:
        return code_eagle.checksum(entry)
    return logits_checksum(entry.model(checksum_input(entry.tokenizer).to(model_device(entry.model))).logits)
