"""``mmspec train deer | eagle | msd | flash | image-drafter``: check the arguments, gather the data (a user's
files, or the zoo's own corpus and scenes for a zoo target), run a trainer of :mod:`mmspec.training` and write
its output atomically with its ``mmspec.json`` record. Checkpoints go to ``<out>.ckpt``; ``--resume`` continues
a killed run.

The commands sit above both the trainers and the zoo's builders (whose data a zoo target trains on), so
neither of those imports the other's way."""

from __future__ import annotations

import contextlib
import glob
import json
from pathlib import Path

import torch

from . import zoo

from .drafters.dflash_io import load_dflash, save_dflash
from .drafters.dflash_model import DFlashDraftModel, make_config, with_target_layers
from .drafters.diffusion import check_vocabularies, model_vocab_size
from .eval.datasets import read_jsonl
from .drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from .drafters.remote_code import explain_remote_failure
from .image_codes import TokenLayout, layout_of
from .loading import load_target, zoo_name
from .options import TRAIN, check_args
from .targets import Target
from .training.artifact import begin_run, cached, prepare_run, target_identity, write_artifact
from .training.deer import DEERConfig, align, load_dlm, target_generations
from .training.dflash import DFlashTrainConfig, Responses, target_responses, precompute_features, train_dflash
from .training.feature import FeatureTrainConfig, jsonl_batches, read_training_rows, train_feature_drafter
from .training.image_feature import train_image_drafter
from .verifiers.tree_forward import text_config
from .vision import image_token_id
from .zoo import vlm_drafters  # zoo_batches looked up per call (the resume tests replace it)
from .zoo.code_data import ensure_tokenizer, load_corpus
from .zoo.vlm_examples import Encoder, ScenePool


def cmd_train(args) -> int:
    check_args(args, TRAIN)  # types and ranges of the flags given (--scenes 0 is refused, not read as 4096)
    if args.train_command == "deer":
        return cli_train_deer(args)
    if args.train_command == "dflash":
        return cli_train_dflash(args)
    if args.train_command == "image-drafter":
        return cli_train_image_drafter(args)
    return cli_train_feature(args)


KIND_NAMES = {"text": "causal LM (text)", "vlm": "VLM", "image": "visual AR (image generation)", "janus": "Janus"}


def require_target_kind(loaded: Target, wanted: tuple[str, ...], command: str, spec: str) -> None:
    """Refuse a target of another kind than the command trains for with one ValueError naming both kinds, before
    any work (not an AttributeError from deep inside training)."""
    route = loaded.route  # a model mmspec cannot place raises its own ValueError here
    if route not in wanted:
        need = " or ".join(KIND_NAMES[w] for w in wanted)
        raise ValueError(f"mmspec train {command} trains drafters for {need} targets; {spec} is not a {need} target "
                         f"(it is a {KIND_NAMES.get(route, route)} target)")


def read_text_files(pattern: str) -> list[str]:
    """The texts of the files ``pattern`` matches, each checked before training starts."""
    files = sorted(f for f in glob.glob(pattern, recursive=True))
    dirs = [f for f in files if not Path(f).is_file()]
    files = [f for f in files if Path(f).is_file()]
    if len(files) < 2:
        also = f" (and directories {dirs[:3]})" if dirs else ""
        raise ValueError(f"--data {pattern!r} matches {len(files)} files{also}; need at least 2 text files "
                         "(train + val)")
    texts, bad = [], []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            bad.append(f"{f}: {err}")
            continue
        if not text.strip():
            bad.append(f"{f}: empty")
        texts.append(text)
    if bad:
        raise ValueError(f"--data: {len(bad)} unusable file(s): " + "; ".join(bad[:5])
                         + (" ..." if len(bad) > 5 else ""))
    return texts


def cli_train_deer(args) -> int:
    """``mmspec train deer``: align a diffusion LM (stock causal-LM class run bidirectionally) to a target.
    Checkpoints go to ``<out>.ckpt`` (``--resume`` continues a killed run); the output is written atomically
    with its ``mmspec.json`` record, so ``mmspec.pipeline(target, drafter=OUT)`` runs it as a DEER drafter."""
    stages = tuple(int(x) for x in args.stages.split(",") if x.strip().isdigit())
    if stages not in ((1,), (1, 2)):
        raise ValueError(f"--stages must be '1' or '1,2', got {args.stages!r}")
    for name in ("stage1_steps", "stage2_steps", "samples", "val_samples"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.data:
        train_texts = read_text_files(args.data)  # checked before anything is loaded or trained
        cut = max(1, len(train_texts) // 20)
        train_texts, val_texts = train_texts[cut:], train_texts[:cut]
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "checkpoint_every")}
    ckpt = prepare_run(args.out, args.resume, settings)
    loaded = load_target(args.target)
    require_target_kind(loaded, ("text",), "deer", args.target)
    target, tok = loaded.model, loaded.tokenizer
    dlm, dlm_tok = load_dlm(args.dlm, getattr(args, "trust_remote_code", False))
    if tok is None or dlm_tok is None:
        raise ValueError("mmspec train deer needs a tokenizer next to both models (or zoo:<name> models)")
    check_vocabularies(model_vocab_size(dlm), model_vocab_size(target), dlm_tok, tok)
    mask_id = args.mask_token_id if args.mask_token_id is not None else tok.mask_token_id
    if mask_id is None:
        mask_id = tok.convert_tokens_to_ids("<mask>") if "<mask>" in tok.get_vocab() else None
    if mask_id is None:
        raise ValueError("the tokenizer has no mask token: pass --mask-token-id")
    if not 0 <= mask_id < model_vocab_size(dlm):
        raise ValueError(f"--mask-token-id {mask_id} is outside the diffusion LM's vocabulary "
                         f"({model_vocab_size(dlm)} ids)")
    if not args.data:
        corpus = load_corpus()
        train_texts, val_texts = corpus.texts("train"), corpus.texts("val")
    eos = tok.eos_token_id

    def stream(texts):
        ids = tok(texts, add_special_tokens=False).input_ids
        return torch.tensor([t for doc in ids for t in doc + ([eos] if eos is not None else [])], dtype=torch.long)

    cfg = DEERConfig(stage1_steps=args.stage1_steps, stage2_steps=args.stage2_steps, n_train=args.samples,
                     n_val=args.val_samples, convention=args.convention)
    train_stream, val_stream = stream(train_texts), stream(val_texts)
    for name, s in (("training", train_stream), ("validation", val_stream)):
        if s.numel() < cfg.prefix_max + 2:
            raise ValueError(f"the {name} text holds {s.numel()} tokens; DEER cuts prefixes of up to "
                             f"{cfg.prefix_max} tokens: give more text")
    begin_run(ckpt, settings)  # every check passed: training starts
    remote = getattr(dlm, "_mmspec_remote", None)
    # a remote-code model runs its own modeling file during alignment (4-D masks, position ids): its errors
    # name that file, like errors while loading it
    with explain_remote_failure(*remote) if remote else contextlib.nullcontext():
        report = align(dlm, target, train_stream, val_stream, mask_id, cfg, stages, checkpoint=ckpt,
                       checkpoint_every_s=args.checkpoint_every)

    def save(d):
        dlm.save_pretrained(d)
        dlm_tok.save_pretrained(d)
        (d / "deer.json").write_text(json.dumps({"from": args.dlm, **report}, indent=2))

    record = {"kind": "diffusion-lm", "method": "deer", "route": "text", "convention": args.convention,
              "mask_token_id": int(mask_id), "attention_pattern": cfg.pattern, "block_tokens": 8,
              "target": target_identity(args.target, target), "from": args.dlm, "trained_by": "mmspec train deer",
              "settings": settings, "stages": list(stages)}
    out = write_artifact(args.out, save, record)
    a = report["agreement"]
    last = f"after_stage{stages[-1]}"
    print(f"greedy block agreement (k=8): before {a['before'][8]['accepted']:.2f}, after {a[last][8]['accepted']:.2f}"
          f" tokens; saved to {out}")
    return 0


def dflash_rows(path: str, tok) -> list[tuple[list[int], list[int] | None]]:
    """(prompt ids, response ids or None) per row of a ``--data`` .jsonl of ``prompt`` and optional ``response``;
    every bad row is reported as ``file:line`` before anything runs."""
    rows, bad = [], []
    for n, r in enumerate(read_jsonl(path, ("prompt",)), 1):
        prompt, response = r["prompt"], r.get("response")
        if not isinstance(prompt, str) or not prompt:
            bad.append(f"{path}:{n}: prompt must be a non-empty string")
            continue
        if response is not None and (not isinstance(response, str) or not response):
            bad.append(f"{path}:{n}: response must be a non-empty string when given")
            continue
        ids = tok(prompt, add_special_tokens=False).input_ids
        resp = tok(response, add_special_tokens=False).input_ids if response is not None else None
        if resp is not None and len(resp) < 2:
            bad.append(f"{path}:{n}: response of {len(resp)} token(s): a block needs at least 2")
            continue
        rows.append((ids, resp))
    if bad:
        raise ValueError(f"--data: {len(bad)} bad row(s): " + "; ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""))
    if len(rows) < 4:
        raise ValueError(f"--data {path} holds {len(rows)} usable rows; need at least 4 (training + validation)")
    return rows


def _respond(target, rows, max_new_tokens: int, eos, pad: int, partial: Path, progress: bool = True,
             pictures: list[dict] | None = None, temperature: float | None = None):
    """The target's greedy response (or one sampled at ``temperature``) for every row without one (batched by prompt
    length, each finished batch saved so a killed run goes on from the next:
    :func:`~mmspec.training.dflash.target_responses`), with each row's picture inputs where the target is a VLM."""
    todo = [i for i, (_, r) in enumerate(rows) if r is None]
    inputs = stacked_inputs([pictures[i] for i in todo], target) if pictures is not None and todo else None
    answers = dict(zip(todo, target_responses(target, [rows[i][0] for i in todo], max_new_tokens, eos, pad,
                                              partial=partial, progress=progress, inputs=inputs,
                                              temperature=temperature)))
    return [(p, r if r is not None else answers[i]) for i, (p, r) in enumerate(rows)]


IMAGE_INPUTS = ("pixel_values", "image_grid_thw", "image_sizes")  # a processor's per-picture outputs, stacked by row


def dflash_image_rows(path: str, processor) -> list[tuple[list[int], list[int] | None, dict]]:
    """(prompt ids with the picture's placeholders expanded, response ids or None, the picture's inputs) per row of
    a VLM ``--data`` .jsonl of ``image``, ``prompt`` (holding the processor's image placeholder) and optional
    ``response``, read through the target's processor; every bad row reported before anything runs."""
    from PIL import Image

    rows = read_training_rows(path, getattr(processor, "image_token", "<image>"), need_response=False)
    tok = getattr(processor, "tokenizer", processor)
    out, short = [], []
    for n, r in enumerate(rows, 1):
        enc = processor(images=[Image.open(r["image"]).convert("RGB")], text=[r["prompt"]], return_tensors="pt")
        resp = tok(r["response"], add_special_tokens=False).input_ids if r.get("response") else None
        if resp is not None and len(resp) < 2:
            short.append(f"{path}: row {n}: response of {len(resp)} token(s): a block needs at least 2")
        out.append((enc["input_ids"][0].tolist(), resp, {k: enc[k] for k in IMAGE_INPUTS if k in enc}))
    if short:
        raise ValueError(f"--data: {len(short)} bad row(s): " + "; ".join(short[:5]))
    if len(out) < 4:
        raise ValueError(f"--data {path} holds {len(out)} usable rows; need at least 4 (training + validation)")
    return out


def stacked_inputs(pictures: list[dict], target):
    """``inputs(rows, ids)`` for :func:`~mmspec.training.dflash.target_responses` / ``precompute_features``: those
    rows' picture inputs, concatenated in row order (one picture per row); an M-RoPE target (a picture's grid given)
    also gets the token types of ``ids`` as its processor lays them out (1 on the image placeholders)."""
    image_id = image_token_id(target)

    def inputs(idx, ids):
        out = {k: torch.cat([pictures[i][k] for i in idx]) for k in pictures[idx[0]]}
        if "image_grid_thw" in out:
            out["mm_token_type_ids"] = (ids == image_id).int()
        return out

    return inputs


def _nested(n: int) -> list[int]:
    """Powers of two up to ``n``, and ``n``: the compression settings a drafter with ``n`` queries trains on by
    default (as ``train flash`` does)."""
    return sorted({2 ** i for i in range(n.bit_length()) if 2 ** i <= n} | {n})


def dflash_init(spec: str, dcfg) -> dict:
    """The weights of the DFlash drafter ``spec`` (``zoo:<name>`` or a directory, either layout) to start training
    from, checked against the shape ``dcfg`` this run trains (layers, width, block size, target layers, mask). Target
    layers may be added to the ones it reads (``--target-layers`` naming all of its own and more): their ``fc``
    columns start at zero, so training starts from exactly its drafts (:func:`with_target_layers`)."""
    name = zoo_name(spec)
    path = zoo.zoo_home() / name if name is not None else Path(spec)
    if not path.is_dir():
        raise ValueError(f"--init {spec}: no such drafter directory ({path})")
    try:
        src = load_dflash(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable directory: one message naming it
        raise ValueError(f"--init {spec}: not a DFlash drafter ({type(exc).__name__}: {exc})") from None
    fresh = DFlashDraftModel(dcfg)
    wanted = fresh.target_layer_ids
    if set(src.target_layer_ids) < set(wanted):  # (more layers than it reads: a warm start that drafts as it did)
        src = with_target_layers(src, wanted)
    mine = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    state = src.state_dict()
    if "queries" in mine and "queries" not in state:  # adding picture compression to a drafter without it
        state["queries"] = fresh.queries.detach().clone()
    theirs = {k: tuple(v.shape) for k, v in state.items()}
    problems = [f"{k}: {theirs.get(k)} vs {mine.get(k)}" for k in sorted(set(mine) | set(theirs))
                if theirs.get(k) != mine.get(k)]
    if src.block_size != fresh.block_size:
        problems.append(f"block size {src.block_size} vs {fresh.block_size}")
    if src.target_layer_ids != fresh.target_layer_ids:
        problems.append(f"target layers {src.target_layer_ids} vs {fresh.target_layer_ids}")
    if src.mask_token_id != fresh.mask_token_id:
        problems.append(f"mask token {src.mask_token_id} vs {fresh.mask_token_id}")
    if problems:
        raise ValueError(f"--init {spec} has another shape than this run's drafter (--layers / --block-size / "
                         f"--target-layers / --mask-token-id / --visual-queries): " + "; ".join(problems[:4]))
    return state


def cli_train_dflash(args) -> int:
    """``mmspec train dflash``: a DFlash block-diffusion drafter for a causal LM target, on the target's own
    responses: ``--data`` rows (their ``response``, or the target's greedy one) or ``--generate N`` continuations of
    prefixes cut from the zoo's code corpus (or ``--corpus`` text files). Checkpoints go to ``<out>.ckpt``
    (``--resume``); the output (z-lab layout, or ``--layout speculators``) is written atomically with its
    ``mmspec.json`` record, so ``mmspec.pipeline(target, drafter=OUT)`` and ``mmspec eval`` run it as ``dflash``."""
    if (args.data is None) == (args.generate is None):
        raise ValueError("give exactly one of --data FILE (.jsonl of prompt / response) or --generate N")
    for name in ("steps", "batch_size", "anchors", "layers", "block_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.block_size < 2 or (args.generate is not None and args.generate < 8):
        raise ValueError("--block-size must be >= 2 and --generate >= 8")
    if args.lr <= 0 or args.budget_s <= 0 or args.kl_weight < 0:
        raise ValueError("--lr and --budget-s must be > 0, --kl-weight >= 0")
    if args.temperature is not None and (args.data is None or not args.temperature > 0):
        raise ValueError(f"--temperature samples the responses of --data rows that have none: it needs --data and a "
                         f"value > 0, got {args.temperature}")
    layer_ids = [int(x) for x in args.target_layers.split(",")] if args.target_layers else None
    loaded = load_target(args.target)
    target, tok = loaded.model, loaded.tokenizer
    require_target_kind(loaded, ("text", "vlm"), "dflash", args.target)
    vlm = loaded.route == "vlm"
    if tok is None:
        raise ValueError("mmspec train dflash needs the target's tokenizer (a VLM's processor) next to its weights")
    choices = [int(x) for x in args.compress_choices.split(",")] if args.compress_choices else []
    if args.visual_queries < 0 or any(c < 0 or c > args.visual_queries for c in choices):
        raise ValueError(f"--compress-choices {args.compress_choices} must lie in 0..--visual-queries "
                         f"({args.visual_queries}; 0 = the full picture)")
    blocks = [int(x) for x in args.block_choices.split(",")] if args.block_choices else []
    if any(b != 0 and not 2 <= b <= args.block_size for b in blocks):
        raise ValueError(f"--block-choices {args.block_choices} must lie in 2..--block-size ({args.block_size}; 0 = "
                         "the whole block)")
    if args.visual_queries and not vlm:
        raise ValueError("--visual-queries compresses pictures: it needs a VLM target")
    if vlm and (args.data is None or args.kl_weight > 0 or args.online_features or args.select_by != "greedy"):
        raise ValueError("a VLM target trains on --data rows of image / prompt (/ response), with its features "
                         "computed once per row (no --kl-weight, --online-features or --select-by sampled)")
    pictures = None
    if vlm:  # checked before any work
        rows = dflash_image_rows(args.data, tok)
        pictures = [r[2] for r in rows]
        rows = [r[:2] for r in rows]
        tok = getattr(tok, "tokenizer", tok)
    else:
        rows = dflash_rows(args.data, tok) if args.data else None
    mask_id = args.mask_token_id if args.mask_token_id is not None else tok.mask_token_id
    if mask_id is None and "<mask>" in tok.get_vocab():
        mask_id = tok.convert_tokens_to_ids("<mask>")
    if mask_id is None:
        raise ValueError("the tokenizer has no mask token: pass --mask-token-id (any id the target never emits)")
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "checkpoint_every")}
    ckpt = prepare_run(args.out, args.resume, settings)
    # the drafter's shape (layer ids, block size) checked before minutes of target responses
    dcfg = make_config(text_config(target), num_layers=args.layers, block_size=args.block_size, mask_token_id=mask_id,
                       target_layer_ids=layer_ids, visual_queries=args.visual_queries)
    init = dflash_init(args.init, dcfg) if args.init else None
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos or 0)
    texts = None
    if rows is None:
        texts = read_text_files(args.corpus) if args.corpus else None
        if texts is None:
            corpus = load_corpus()
            texts = corpus.texts("train") + corpus.texts("val")
        ids = tok(texts, add_special_tokens=False).input_ids
        stream = torch.tensor([t for doc in ids for t in doc + ([eos] if eos is not None else [])], dtype=torch.long)
        gcfg = DEERConfig(gen_len=args.max_new_tokens, gen_batch=64)
        if stream.numel() < 4 * (gcfg.prefix_max + 2):
            raise ValueError(f"the corpus holds {stream.numel()} tokens: too little to cut prefixes from")
    begin_run(ckpt, settings)  # every check passed: training starts
    features = val_features = None
    if rows is not None:
        rows = _respond(target, rows, args.max_new_tokens, eos, pad, ckpt / "responses.partial.pt", pictures=pictures,
                        temperature=args.temperature)
        n_val = max(2, len(rows) // 20)
        train, val = Responses.from_rows(rows[n_val:], pad), Responses.from_rows(rows[:n_val], pad)
    else:
        cut = stream.numel() // 20
        n_val = max(8, args.generate // 32)
        train = cached(ckpt / "generations-train.pt", lambda: target_generations(
            target, stream[cut:], args.generate, gcfg, 2024, pad_id=pad, partial=ckpt / "generations-train.partial.pt"))
        val = cached(ckpt / "generations-val.pt", lambda: target_generations(
            target, stream[:cut], n_val, gcfg, 2025, pad_id=pad, partial=ckpt / "generations-val.partial.pt"))
    cfg = DFlashTrainConfig(steps=args.steps, budget_s=args.budget_s, batch_size=args.batch_size,
                            anchors=args.anchors, lr=args.lr, kl_weight=args.kl_weight,
                            cache_features=not args.online_features, select_by=args.select_by,
                            compress_choices=tuple(choices or ([0, *_nested(args.visual_queries)]
                                                               if args.visual_queries else [])),
                            block_choices=tuple(blocks))
    with torch.random.fork_rng():  # the same command trains the same drafter (and a resumed run matches it)
        torch.manual_seed(cfg.seed)
        net = DFlashDraftModel(dcfg)
        if init is not None:  # fine-tuning: another recipe's drafter as the starting point
            net.load_state_dict(init)
        net = net.to(target.device)
        if pictures is not None:  # the features over the placeholders need the pictures: computed here, once
            features, val_features = (precompute_features(target, net, data, inputs=stacked_inputs(part, target))
                                      for data, part in ((train, pictures[n_val:]), (val, pictures[:n_val])))
        report = train_dflash(net, target, train, val, cfg, checkpoint=ckpt / "train.pt",
                              checkpoint_every_s=args.checkpoint_every, features=features,
                              val_features=val_features, image_token_id=image_token_id(target) if vlm else None)

    def save(d):
        save_dflash(net, d, layout=args.layout, verifier=args.target,
                    verifier_architectures=list(getattr(target.config, "architectures", None) or []))
        tok.save_pretrained(d)
        (d / "train_report.json").write_text(json.dumps(report, indent=2, default=str))

    record = {"kind": "dflash", "method": "dflash", "route": "vlm" if vlm else "text", "layout": args.layout,
              "target": target_identity(args.target, target), "trained_by": "mmspec train dflash",
              "settings": settings}
    out = write_artifact(args.out, save, record)
    after = report["heldout_after"]
    print(f"DFlash drafter saved to {out}; held-out greedy accepted length of a block {after['accepted_length']:.2f} "
          f"(before training {report['heldout_before']['accepted_length']:.2f}); per-slot agreement "
          f"{[round(a, 2) for a in after['slot_agreement'][:6]]} ...")
    if "sampled_accepted_length" in after:
        print(f"expected accepted length of independent draws at T = 1 {after['sampled_accepted_length']:.2f} (before "
              f"{report['heldout_before']['sampled_accepted_length']:.2f}); per-slot overlap "
              f"{[round(a, 2) for a in after['slot_overlap'][:6]]} ...")
    return 0


def cli_train_feature(args) -> int:
    """``mmspec train eagle|msd|flash``: train a feature drafter against a frozen VLM target.
    Checkpoints go to ``<out>.ckpt`` (``--resume`` continues a killed run); the output is written atomically
    with its ``mmspec.json`` record."""
    method = args.train_command
    zoo_target = args.target.startswith("zoo:")
    if zoo_target and args.data:
        raise ValueError("--data is for checkpoint targets; the zoo target trains on its own scenes (--scenes)")
    if not zoo_target and args.scenes is not None:
        raise ValueError("--scenes applies to the zoo target only; a checkpoint target trains on --data")
    if not zoo_target and not args.data:
        raise ValueError("training against a checkpoint needs --data (a .jsonl of image / prompt / response)")
    for name in ("stage1_steps", "stage2_steps"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    if args.stage1_steps + args.stage2_steps < 1 or args.batch_size < 1 or args.budget_s <= 0 or args.lr <= 0:
        raise ValueError("need some steps, --batch-size >= 1, --budget-s > 0 and --lr > 0")
    overrides = {}
    if method == "flash":
        if args.compress_tokens < 1 or args.sar_tokens < 1:
            raise ValueError("--compress-tokens and --sar-tokens must be >= 1")
        overrides = dict(compress_tokens=args.compress_tokens, sar_tokens=args.sar_tokens)
    cfg = FeatureTrainConfig(stage1_steps=args.stage1_steps, stage2_steps=args.stage2_steps,
                             stage1_budget_s=args.budget_s * 0.2, stage2_budget_s=args.budget_s * 0.8,
                             batch_size=args.batch_size, lr=args.lr)
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "checkpoint_every")}
    ckpt = prepare_run(args.out, args.resume, settings)  # checks only: the checkpoint folder comes with training
    loaded = load_target(args.target)
    require_target_kind(loaded, ("vlm",), method, args.target)
    target = loaded.model.eval()
    if zoo_target:
        enc = Encoder(ensure_tokenizer(zoo.zoo_home(), False), target.config.image_seq_length)
        batches = vlm_drafters.zoo_batches(enc, ScenePool("train", args.scenes or 4096), cfg.batch_size, cfg.seed)
        val_fn = vlm_drafters.zoo_batches(enc, ScenePool("val", 64, start=5000), 32, cfg.seed + 99)
        val = [val_fn(i, 1.0) for i in range(2)]
    else:
        processor = loaded.tokenizer
        if processor is None:
            raise ValueError(f"--target {args.target}: no processor next to the weights (its preprocessor and "
                             "tokenizer files); training reads the --data rows through it")
        batches = jsonl_batches(args.data, processor, cfg.batch_size, cfg.seed)  # every row checked here
        val = [batches(-1 - i, 1.0) for i in range(2)]
    # the same command trains the same drafter (and a resumed run matches it): initial weights and every draw
    # of the run come from cfg.seed, on a fork of the global RNG that is restored afterwards
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **overrides)).float()  # float32
        begin_run(ckpt, settings)  # every check passed: training starts
        report = train_feature_drafter(net, target, batches, val, cfg, checkpoint=ckpt,
                                       checkpoint_every_s=args.checkpoint_every)

    def save(d):
        net.save_pretrained(d)
        (d / "train_report.json").write_text(json.dumps(report, indent=2))

    record = {"kind": "feature-drafter", "method": method, "route": "vlm",
              "target": target_identity(args.target, target),
              "compress_tokens": net.config.compress_tokens, "sar_tokens": net.config.sar_tokens,
              "trained_by": f"mmspec train {method}", "settings": settings}
    out = write_artifact(args.out, save, record)
    acc = {k: [round(a, 3) for a in v] for k, v in report["slot_accuracy"].items()}
    print(f"{method} drafter saved to {out}; teacher-forced slot agreement with the target: {acc}")
    return 0


def cli_train_image_drafter(args) -> int:
    """``mmspec train image-drafter``: a feature drafter for the zoo's (or a local) visual AR target.
    Checkpoints go to ``<out>.ckpt`` (``--resume`` continues a killed run); the output is written atomically
    with its ``mmspec.json`` record, so ``mmspec.pipeline(target, drafter=OUT)`` / ``mmspec image --drafter OUT``
    use it."""
    zoo_target = args.target.startswith("zoo:")
    if zoo_target and args.layout is not None:
        raise ValueError("--layout is for checkpoint targets; the zoo target carries its own token layout")
    if args.sar_tokens < 1 or args.samples < 1 or args.val_samples < 1 or args.steps < 1 or args.batch_size < 1:
        raise ValueError("--sar-tokens, --samples, --val-samples, --steps and --batch-size must be >= 1")
    if args.cfg_scale < 0 or args.budget_s <= 0 or args.lr <= 0:
        raise ValueError("--cfg-scale must be >= 0, --budget-s and --lr > 0")
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "resume", "checkpoint_every")}
    ckpt = prepare_run(args.out, args.resume, settings)
    loaded = load_target(args.target)
    # a checkpoint without a layout in its config may be given one with --layout: a causal LM then
    require_target_kind(loaded, ("image",) if args.layout is None else ("image", "text"), "image-drafter",
                        args.target)
    target = loaded.model.eval()
    if zoo_target:
        layout = loaded.extras.get("layout")
        if layout is None:
            raise ValueError(f"{args.target} is not a visual AR target (no token layout)")
    else:
        layout = layout_of(target) if args.layout is None else TokenLayout.from_dict(json.loads(Path(args.layout).read_text()))
    cfg = FeatureTrainConfig(stage1_steps=args.steps, stage1_budget_s=args.budget_s, stage2_steps=0,
                             batch_size=args.batch_size, lr=args.lr)
    begin_run(ckpt, settings)  # every check passed: training starts
    net, report = train_image_drafter(target, layout, args.cfg_scale, args.sar_tokens, args.samples,
                                      val_samples=args.val_samples, train_cfg=cfg, seed=args.seed, checkpoint=ckpt,
                                      checkpoint_every_s=args.checkpoint_every)

    def save(d):
        net.save_pretrained(d)
        (d / "train_report.json").write_text(json.dumps(report, indent=2, default=str))

    record = {"kind": "feature-drafter", "method": "image", "route": "image",
              "drafter": "sar" if args.sar_tokens > 1 else "feature", "cfg_scale": args.cfg_scale,
              "sar_tokens": args.sar_tokens, "target": target_identity(args.target, target),
              "trained_by": "mmspec train image-drafter", "settings": settings}
    out = write_artifact(args.out, save, record)
    acc = [round(a, 3) for a in next(iter(report["slot_accuracy"].values()))]
    print(f"image feature drafter saved to {out}; teacher-forced agreement of its slots with the guided target "
          f"(cfg {args.cfg_scale}): {acc}")
    return 0


__all__ = ["cmd_train", "cli_train_deer", "cli_train_dflash", "dflash_rows", "cli_train_feature", "cli_train_image_drafter", "read_text_files"]
