"""The one table of decoding methods: for every route (text, vlm, image, janus) its methods by their one name, the
options the route takes with their defaults, and how each method's drafter is built from a drafter model.
``mmspec.pipeline``, ``VLMGenerator``, ``ImageGenerator``, ``JanusImageGenerator``, ``mmspec bench`` and the eval
suites all build drafters here, so a method has one name and one set of settings wherever it runs.

Method names: a method is named by what drafts. A small causal LM drafts a ``chain``, a static ``tree`` or a
``dynamic`` (EAGLE-2) tree, on text and VLM targets alike; ``deer`` / ``diffuspec`` take a diffusion LM; ``msd`` /
``flash`` / ``eagle`` a feature drafter; ``prompt-lookup`` no model. ``plain`` is the target's own ``generate``
and ``mmspec-plain`` mmspec's loop without drafts. Image targets: ``ar`` (plain sampling), ``spec`` (lossless),
``lantern``, ``lantern++``. Reports name a setting of a method ``<method>-<setting>`` (``msd-dynamic``,
``flash-4``).
"""

from __future__ import annotations

import torch

from .drafters import (AdaptiveDrafter, AutoregressiveDrafter, DEERDrafter, DiffusionLM, Drafter, FeatureDrafter, NoDrafter,
                       PromptLookupDrafter)
from .drafters.dflash import DFlashDrafter
from .drafters.dflash_model import DFlashDraftModel
from .drafters.diffuspec import ADLConfig, CPSConfig, DiffuSpecDrafter
from .drafters.feature_model import FeatureDraftModel, signature_mismatch
from .drafters.ngram import NGramLM
from .generator import SpeculativeGenerator
from .guidance import DEFAULT_CFG_SCALE
from .options import IMAGE as IMAGE_OPTIONS, ROUTE_OPTIONS, check_options
from .tree import DEFAULT_TREE, TreeTemplate, tree_label
from .verifiers.tree_forward import text_config

# ------------------------------------------------------------------------------------------------ method names

TEXT_METHODS = {
    "plain": "the target's own generate, no drafter",
    "mmspec-plain": "mmspec's decoding loop without drafts (the loop's own baseline)",
    "chain": "a small causal LM drafts a chain",
    "tree": "a small causal LM drafts a static tree",
    "dynamic": "a small causal LM drafts an EAGLE-2 dynamic tree",
    "prompt-lookup": "n-gram lookup in the context, no drafter model",
    "deer": "a diffusion LM drafts a block in one step (DEER)",
    "diffuspec": "a diffusion LM's lattice with causal path search (DiffuSpec)",
    "dflash": "a block-diffusion drafter on the target's features drafts a block in one forward (DFlash): a chain, "
              "or a DDTree with tree_nodes",
    "eagle": "EAGLE-style feature drafter (one layer on the target's last-layer features)",
}
VLM_METHODS = {
    "plain": TEXT_METHODS["plain"],
    "mmspec-plain": TEXT_METHODS["mmspec-plain"],
    "msd": "MSD feature drafter (decoupled visual inputs)",
    "flash": "FLASH feature drafter (compressed visual tokens, semi-autoregressive head)",
    "eagle": "EAGLE-style feature drafter",
    "dflash": TEXT_METHODS["dflash"],
    "chain": "a small text-only causal LM drafts a chain",
    "tree": "a small text-only causal LM drafts a static tree",
    "dynamic": "a small text-only causal LM drafts an EAGLE-2 dynamic tree",
    "prompt-lookup": TEXT_METHODS["prompt-lookup"],
}
IMAGE_METHODS = {
    "ar": "plain AR sampling with CFG",
    "spec": "lossless speculative decoding",
    "lantern": "LANTERN relaxed acceptance (δ caps the mass moved per candidate)",
    "lantern++": "LANTERN++ relaxed acceptance (multiplicative bound λ, static tree)",
}
METHODS = {"text": TEXT_METHODS, "vlm": VLM_METHODS, "image": IMAGE_METHODS, "janus": IMAGE_METHODS}
CAUSAL_METHODS = ("chain", "tree", "dynamic")  # a small causal LM drafts
DIFFUSION_METHODS = ("deer", "diffuspec")  # a diffusion LM drafts
FEATURE_METHODS = ("msd", "flash", "eagle")  # a feature drafter reads the target's hidden states
BLOCK_METHODS = ("dflash",)  # a block-diffusion drafter reads several of the target's layers
NO_MODEL_METHODS = ("plain", "mmspec-plain", "prompt-lookup")
# the zoo image target's drafters, by name, and the zoo model each is: small AR model, image-eagle, image-sar,
# image-dflash (the DFlash block drafter)
IMAGE_DRAFTER_MODELS = {"ar": "image-drafter", "feature": "image-eagle", "sar": "image-sar", "dflash": "image-dflash"}
IMAGE_DRAFTERS = tuple(IMAGE_DRAFTER_MODELS)
DFLASH_IMAGE_TREES = ("chain", "static", "ddtree")  # what the block drafter drafts: its chain, or the DDTree

# ------------------------------------------------------------------------------------------------ settings

# num_tokens defaults. The VLM feature drafters' chain length was chosen on the zoo's held-out scenes
# (`mmspec eval --suite vlm --repeats 2 --feature-tokens K`, 8 prompts, CPU): EAGLE chain 1.63x / 1.77x / 1.89x / 1.84x
# and MSD chain 1.64x / 1.70x / 1.84x / 1.76x plain decoding at K = 4 / 6 / 8 / 10 (tau 3.20 / 3.84 / 4.57 / 4.57 for
# EAGLE: from 8 on, the answer ends before the chain does). FLASH drafts its semi-autoregressive head's own block.
# A chain that stops where the drafter's confidence in its last draft falls below CHAIN_CONFIDENCE (HF's
# assistant_confidence_threshold; the text route and the code bench) drafts up to CONFIDENT_CHAIN_TOKENS; a chain
# without that stop (the VLM route's text-only drafter) drafts DRAFT_TOKENS["chain"]. On the zoo's code target (15 layers, 8 held-out test
# prompts x 64 tokens, greedy, tau and drafter forwards per step measured, speedup predicted with the eval's cost
# model): k = 4 with the accept-history schedule tau 2.91 (1.48x predicted, 1.43-1.45x measured), k = 8 tau 3.53
# (1.56x); k = 8 with confidence 0.3 / 0.4 / 0.5 / 0.6 tau 4.03 / 3.82 / 3.56 / 3.39 (1.73x / 1.75x / 1.72x / 1.71x);
# k = 12 at 0.4 tau 4.06 (1.76x), k = 16 at 0.5 3.88 (1.74x).
# DEER's block is a chain too, and the same confidence cuts it (every slot comes from one dLM forward, so the cut
# only shortens the verification): code-deer at k = 8, same prompts, measured speedup 0.95x without the cut, 1.04x /
# 1.11x / 1.12x / 1.14-1.17x / 1.16-1.18x at 0.1 / 0.2 / 0.3 / 0.4 / 0.5-0.7, tau 2.04-2.05 throughout; k = 16 at 0.4
# 1.12-1.15x. One threshold serves both.
DRAFT_TOKENS = {"chain": 4, "dynamic": 4, "prompt-lookup": 4, "deer": 8, "diffuspec": 8, "eagle": 8, "msd": 8}
CHAIN_CONFIDENCE, CONFIDENT_CHAIN_TOKENS = 0.4, 8


def draft_length(method: str, num_tokens: int | None = None) -> int | None:
    """``num_tokens`` if given, else the method's default draft length (None: the drafter decides, e.g. FLASH's
    semi-autoregressive block)."""
    return num_tokens or DRAFT_TOKENS.get(method)


DYNAMIC_TREE = dict(top_k=4, num_nodes=16)  # EAGLE-2 expansion width and kept nodes
DFLASH_TREE = dict(tree_nodes=16, top_k=4)  # DDTree's node budget and per-slot candidates
# the same DDTree with a prompt-lookup branch of up to 12 tokens grafted on (greedy calls): on the code suite's 8
# prompts (2026-11-26, one sweep) lookup 8 / 12 / 16 took tau 4.65 -> 5.57 / 6.32 / 6.56 and 2.21x -> 2.49 / 2.77 /
# 2.80x; on 24 HumanEval prompts 1.12x -> 1.37 / 1.38 / 1.32x (a longer branch costs verification there)
DFLASH_TREE_LOOKUP = dict(DFLASH_TREE, lookup=12)
# and steps whose lookup continuation has 4 tokens or more verify it alone, without the block drafter (greedy calls):
# in one process on this CPU (2026-11-27, two runs each) 2.89-2.91x against 2.74-2.75x on the code suite's 8 prompts
# and 1.54-1.56x against 1.47-1.48x on 24 HumanEval prompts (prompt lookup alone 1.44-1.46x); a threshold of 3 did
# the same, 2 or 8 less (docs/runs/2026-11-27-cpu/lookup-alone/); since 2026-11-28 only after a match of two tokens
# or more (dflash.ALONE_MATCH)
DFLASH_LOOKUP_ALONE = dict(DFLASH_TREE_LOOKUP, lookup_alone=4)
# and the DDTree stops growing at prefixes less probable than 3% (tree_cut): on a CPU the verify forward over the
# 28 nodes of the tree and its branch costs 1.6-1.85 plain steps, and where the drafter is unsure most of them are not
# accepted. In one process (2026-11-27, docs/runs/2026-11-27-cpu/tree-cut/): 24 HumanEval prompts 1.51x against
# 1.44x without the cut (two repeats; 5% at 0.05 in a one-repeat run: 1.58x against 1.55x), the code suite's 16
# prompts 2.38x against 2.41x. With ALONE_MATCH (2026-11-28) the zoo's greedy default for the code target (see
# routes/zoo_defaults.py): HumanEval 1.57x against 1.54x without the cut, the suite 3.28x against 3.29x
DFLASH_LOOKUP_CUT = dict(DFLASH_LOOKUP_ALONE, tree_cut=0.03)
IMAGE_DFLASH_TREE = dict(tree_nodes=16, top_k=4)  # the same on the image target (tree="ddtree")
# ... and under the Gumbel coupling, where a step right after a drafter forward drafts from its leftover slots
# (2026-11-28, docs/runs/2026-11-28-cpu/gumbel/ab-1.json: 1.44x -> 1.50x plain AR, tau 2.83 -> 2.74; under p/q
# rejection the same reuse measured 1.27x -> 1.28x, so the rejection DDTree keeps its forward every step)
# then re-chosen picture by picture against plain AR (docs/runs/2026-11-28-cpu/engine/pic-b.json, pic-c.json: 16 pictures
# in two runs): a tree of 12 nodes whose leftover slots serve up to two steps after a forward while 5 remain, 1.375x
# and 1.577x against 1.349x and 1.530x for 16 nodes reusing once (tau 2.49-2.56 against 2.69-2.73: fewer nodes to
# verify and fewer drafter forwards); and each slot's top 8 codes searched instead of 4 (under the coupling the target's
# code is often further down a slot's perturbed ranking): 1.505x -> 1.543x, 1.531x -> 1.546x, 1.478x -> 1.508x on 28
# pictures in three runs (engine/topk-1.json, topk-3.json, topk-4.json)
IMAGE_DFLASH_GUMBEL_TREE = dict(IMAGE_DFLASH_TREE, tree_nodes=12, top_k=8, reuse_block=5, reuse_steps=2)
# what a DFlash or feature drafter built here computes its products with: int8 weight-only products where the device has the
# kernel (a CPU; mmspec.kernels.int8_linear) and the drafter is large enough to fall out of the cache between steps
# (int8_linear.AUTO_INT8_BYTES: of the zoo's, code-dflash and code-eagle), else float. Side by side on this 2-core CPU (2026-11-28,
# docs/runs/2026-11-28-cpu/int8-drafter/): dflash-lookup-cut's drafting step 4.9 -> 4.1 ms, 24 HumanEval prompts
# 1.562x -> 1.601x and the code suite's 16 prompts 2.640x -> 2.699x, tau the same, every output exact
DRAFT_WEIGHTS = "auto"
# DiffuSpec's CPS mix of dLM and causal-proxy scores for the zoo. The paper's λ = 0.5 suits a 7B dLM with a strong
# n-gram; here the 4-gram (3.48 nats/token) is weaker than the dLM, and held-out *validation* prompts
# (8 × 64 tokens, greedy, k = 8) gave τ 1.82 / 2.04 / 2.18 / 1.97 for λ = 0.5 / 0.7 / 0.85 / 1.0.
CPS_LAMBDA = 0.85
# DiffuSpec's ADL range for the zoo, used with the confidence cut (``confidence``, CHAIN_CONFIDENCE): the paper's
# ADL follows the raw draft's EOS, and a 64-token code completion's draft holds none, so without the cut k never
# leaves its start. Held-out *validation* prompts (8 x 64 tokens, greedy, repeats 2, 2026-11-24, a probe
# outside the eval): k 8 without the cut 0.77x plain (tau 1.70), fixed k 4 0.82x; with the cut at 0.4, fixed
# k 8 / 16 0.82x / 0.89x, ADL k in [4, 16] delta 4 0.88x, [2, 8] delta 1 0.90x, [2, 16] delta 2 0.88x (tau 1.63-1.64);
# cuts at 0.3 / 0.6 with [2, 16] 0.88x / 0.87x. Differences under 0.04 are within one run's timing noise.
ZOO_ADL = ADLConfig(k_min=2, k_max=8, delta=1)
# Each relaxed method's default bound and neighbour count (``lantern_k``: latent neighbours per code that mass may
# move onto). LANTERN++'s were chosen on the zoo (`mmspec eval --suite image --repeats 2`, 2026-11-23, 2-core CPU,
# image-eagle, static tree): lambda 2 / k 8 ran at 0.90x plain AR (tau 2.43), lambda 5 / k 16 at 1.02x (tau 2.75),
# lambda 10 / k 16 at 1.17x (tau 3.23) with FD 0.48 against a plain-AR run-to-run range of 0.28-0.90 (96 pictures).
# With image-eagle rebuilt on 8192 samples lambda 10 / k 16 runs at 1.33-1.35x (tau 3.41), FD 0.95 (outside that
# range by 0.05; FD of one relaxed run moves by about 1 between drafters, see the README). On 2026-11-24 (lean drafter
# layer) lambda 20 / 50 raised tau to 3.60 / 3.85 (1.43x / 1.44x; lambda 50 on 2x1x1x1x1x1: 1.46-1.47x) at about the
# default's FD and class fidelity but a higher mean output TV (0.24 / 0.28 against 0.19): the default stays lambda 10.
# After the cheaper verification step (same day) lambda 10 ran at 1.28-1.35x on this tree and 1.41-1.47x on the 9-node
# TreeTemplate.spine(7, 1) at the same output TV (mean 0.18 / 0.19); lambda 50 on the spine at 1.72-1.77x (tau 4.10).
BOUND_DEFAULTS = {"lantern": dict(delta=0.1, lantern_k=8), "lantern++": dict(lam=10.0, lantern_k=16)}
# LANTERN++'s static tree: depth 5, wider near the root (all draft probabilities are low). Kept to 18 nodes:
# on a CPU the verify forward costs in proportion to the nodes (a (4, 2, 2, 1, 1) tree of 60 nodes made a
# 48-image batch 30x slower than plain AR in the first measurement)
LANTERN_TREE = TreeTemplate.full((2, 2, 1, 1, 1))

OPTIONS = {  # what each route takes (mmspec.pipeline's **options), with its defaults
    "text": dict(num_tokens=None, confidence=CHAIN_CONFIDENCE, tree=None, top_k=DYNAMIC_TREE["top_k"],
                 num_nodes=DYNAMIC_TREE["num_nodes"], causal=None, cps=True, adl=True, lattice=False, cps_config=None,
                 adl_config=None, tree_nodes=None, block=None, draft_vocab=None, lookup=None,
                 lookup_alone=None, tree_cut=None, weights=None, adaptive=None),
    "vlm": dict(num_tokens=None, tree=None, top_k=DYNAMIC_TREE["top_k"], num_nodes=None, compress_to=None,
                adaptive=None, confidence=CHAIN_CONFIDENCE, tree_nodes=None, block=None, draft_vocab=None,
                lookup=None, lookup_alone=None, tree_cut=None, weights=None),
    "image": dict(cfg_scale=DEFAULT_CFG_SCALE, temperature=1.0, lantern_k=None, delta=None, lam=None,
                  tree=None, num_tokens=None, vq=None, feature_drafter=None, sar_drafter=None),
    "janus": dict(cfg_scale=DEFAULT_CFG_SCALE, do_sample=False, temperature=1.0, lantern_k=None, delta=None,
                  lam=None, tree=None, num_tokens=None, decode=True),
}  # types, ranges and the methods each applies to: mmspec.options.ROUTE_OPTIONS (None: the method's default)
IMAGE_TREE, IMAGE_CHAIN_TOKENS = "static", 4  # the image methods' default tree and chain length
# a drafter's own defaults where they differ, for a call that leaves tree / num_tokens / lam unset (an explicit tree
# keeps its meaning: tree="chain" with image-dflash is still its whole block). Chosen from the measured image suites
# (README, "Image generation"; docs/runs/2026-11-26-cpu): image-dflash's first 8 slots as a chain under LANTERN++
# λ = 50 ran 2.04x, 2.04x and 2.26x plain AR at batch 1, FD 0.50 inside plain AR's run-to-run range (0.28-0.90),
# where image-eagle's default (the static tree, λ = 10) ran 1.30x
IMAGE_DRAFTER_DEFAULTS = {"dflash": dict(tree="chain", num_tokens=8, lam=50.0)}


def image_defaults(drafter: str, method: str, tree, num_tokens: int | None, lam: float | None) -> tuple:
    """``(tree, num_tokens, lam)`` of an image call with drafter ``drafter``: the given ones, the unset ones from
    :data:`IMAGE_DRAFTER_DEFAULTS` (``num_tokens`` only with the drafter's default tree, ``lam`` only for
    LANTERN++), else the registry's (``IMAGE_TREE``; ``num_tokens`` None; ``lam`` None: ``BOUND_DEFAULTS``)."""
    own = IMAGE_DRAFTER_DEFAULTS.get(drafter, {}) if method != "ar" else {}
    if tree is None:
        tree = own.get("tree", IMAGE_TREE)
        if num_tokens is None:
            num_tokens = own.get("num_tokens")
    if lam is None and method == "lantern++":
        lam = own.get("lam")
    return tree, num_tokens, lam

# ------------------------------------------------------------------------------------------------ checks


def take_options(options: dict, route: str, method: str | None = None) -> dict:
    """``options`` over the route's defaults, each checked against its declaration (``mmspec.options``): a name
    the route does not take, a value of the wrong type or out of range, or (with ``method``) a setting that does
    not apply to that method is a ValueError naming it."""
    allowed = OPTIONS[route]
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(f"unknown options for the {route} route: {sorted(unknown)}; it takes {sorted(allowed)}")
    checked = check_options(ROUTE_OPTIONS[route], options, method=method, where=f"the {route} route")
    return {**allowed, **checked}


def options_set(options: dict, route: str) -> list[str]:
    """The names of the options a caller set: not None and not the route's default."""
    return [k for k, v in options.items() if v is not None and not _same(v, OPTIONS[route].get(k))]


def check_applies(options: dict, route: str, method: str) -> None:
    """The options set (not None, not the route's default) apply to ``method``: a drafting setting the method would
    drop is refused."""
    check_options(ROUTE_OPTIONS[route], options, method=method, given=options_set(options, route),
                  where=f"the {route} route")


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a plain equality (tensors, models) differ
        return False


def wrong_method(method: str, route: str, target_name: str, model) -> ValueError:
    """The error for a method the route does not offer, naming the routes that do."""
    owners = []
    for r, table in METHODS.items():
        if method in table and table is not METHODS[route]:
            group = " / ".join(x for x, t in METHODS.items() if t is table)
            if group not in owners:
                owners.append(group)
    where = f"it is a method for {' and '.join(o + ' targets' for o in owners)}; " if owners else ""
    return ValueError(f"method {method!r} does not apply to {target_name} ({type(model).__name__}, a {route} "
                      f"target): {where}choose from {list(METHODS[route])}")


def _is_causal_lm(obj) -> bool:
    return isinstance(obj, torch.nn.Module) and hasattr(obj, "config") and hasattr(obj, "get_output_embeddings") \
        and obj.get_output_embeddings() is not None


def drafter_kind(obj) -> str:
    """What a drafter argument is: none, drafter (ready), diffusion, feature, ngram, causal, janus, or a name."""
    if obj is None:
        return "none"
    if isinstance(obj, str):
        return "name"
    if isinstance(obj, Drafter):
        return "drafter"
    if isinstance(obj, DiffusionLM):
        return "diffusion"
    if isinstance(obj, FeatureDraftModel):
        return "feature"
    if isinstance(obj, DFlashDraftModel):
        return "dflash"
    if isinstance(obj, NGramLM):
        return "ngram"
    if type(obj).__name__ == "JanusForConditionalGeneration":
        return "janus"
    if _is_causal_lm(obj):
        return "causal"
    raise ValueError(f"cannot use a {type(obj).__name__} as a drafter")


def check_vocab(drafter_model, target_model) -> None:
    dv, tv = text_config(drafter_model).vocab_size, text_config(target_model).vocab_size
    if dv != tv:
        raise ValueError(f"drafter vocabulary ({dv} tokens) does not match the target's ({tv} tokens): the drafter "
                         "must share the target's tokenizer")


def check_feature(net: FeatureDraftModel, target_model) -> None:
    problem = signature_mismatch(net.config.target, target_model)
    if problem:
        raise ValueError(f"this feature drafter was trained for another target: {problem}")


def causal_method(tree) -> str:
    """The causal-LM method a tree option asks for: none a chain, ``"dynamic"`` a dynamic tree, a template a tree."""
    return "chain" if tree is None else "dynamic" if tree == "dynamic" else "tree"


# ------------------------------------------------------------------------------------------------ text and VLM


def build_drafter(method: str, model=None, *, target=None, num_tokens: int | None = None, tree=None,
                  top_k: int = DYNAMIC_TREE["top_k"], num_nodes: int | None = DYNAMIC_TREE["num_nodes"],
                  compress_to: int | None = None, causal=None, eos_token_id=None, cps: bool = True, adl: bool = True,
                  lattice: bool = False, cps_config=None, adl_config=None,
                  confidence: float | None = None, tree_nodes: int | None = None, block: int | None = None,
                  draft_vocab=None, lookup: int | None = None, lookup_alone: int | None = None,
                  tree_cut: float | None = None, weights: str | None = None,
                  adaptive: bool | None = False) -> Drafter | None:
    """The drafter of a text or VLM ``method`` (None for ``plain``), from ``model``: a small causal LM
    (chain / tree / dynamic), a DiffusionLM (deer / diffuspec) or a FeatureDraftModel (msd / flash / eagle, with
    ``target`` the model whose features it reads). ``num_tokens`` None is the method's default draft length. A
    ``chain`` with a ``confidence`` stops where the drafter's confidence falls below it (the text route and the code
    bench pass CHAIN_CONFIDENCE) and then drafts at most CONFIDENT_CHAIN_TOKENS by default; None drafts every chain
    to its length, as the VLM route's text-only chain does. ``deer`` cuts its block and ``diffuspec`` each row's draft
    (and so ADL's L_gen) at the same ``confidence``. ``dflash`` takes a DFlashDraftModel and ``target``: a chain of
    ``num_tokens`` slots (default: its whole block) cut at ``confidence``, or with ``tree_nodes`` a DDTree over the
    slots' ``top_k`` tokens (``compress_to``: each picture's context in that many entries, a drafter with visual
    queries; ``block``: blocks of that many positions instead of the whole block; ``draft_vocab``: the only ids it
    drafts; ``lookup``: a prompt-lookup branch of up to that many tokens grafted onto the DDTree; ``lookup_alone``: the
    branch alone, without the block drafter's forward, on greedy steps where every row has one of at least that many
    tokens; ``tree_cut``: the DDTree stops growing at prefixes less probable than that). ``weights``: what a DFlash
    or feature drafter's products compute with, ``DRAFT_WEIGHTS`` when None. ``adaptive``: the
    drafter under :class:`~mmspec.drafters.adaptive.AdaptiveDrafter` (each step drafts or verifies the root alone,
    whichever the call's measurements say is faster): True in every call, None in greedy calls only (a sampling call
    then drafts every step, so a seed fixes its output), False never."""
    drafter = _build_drafter(method, model, target=target, num_tokens=num_tokens, tree=tree, top_k=top_k,
                             num_nodes=num_nodes, compress_to=compress_to, causal=causal, eos_token_id=eos_token_id,
                             cps=cps, adl=adl, lattice=lattice, cps_config=cps_config, adl_config=adl_config,
                             confidence=confidence, tree_nodes=tree_nodes, block=block, draft_vocab=draft_vocab,
                             lookup=lookup, lookup_alone=lookup_alone, tree_cut=tree_cut, weights=weights)
    if adaptive is not False and drafter is not None and not isinstance(drafter, NoDrafter):
        return AdaptiveDrafter(drafter, when_sampling=adaptive is True)
    return drafter


def _build_drafter(method: str, model, *, target, num_tokens, tree, top_k, num_nodes, compress_to, causal,
                   eos_token_id, cps, adl, lattice, cps_config, adl_config, confidence, tree_nodes,
                   block, draft_vocab, lookup, lookup_alone, tree_cut, weights) -> Drafter | None:
    _check_drafter(method, model, tree)
    k = draft_length(method, num_tokens)
    if method == "plain":
        return None
    if method == "mmspec-plain":
        return NoDrafter()
    if method == "prompt-lookup":
        return PromptLookupDrafter(num_tokens=k)
    if method in CAUSAL_METHODS:
        if method == "chain":
            longest = num_tokens or (CONFIDENT_CHAIN_TOKENS if confidence is not None else k)
            return AutoregressiveDrafter(model, num_tokens=longest, confidence=confidence)
        if method == "tree":
            return AutoregressiveDrafter(model, tree=tree or DEFAULT_TREE)
        return AutoregressiveDrafter(model, num_tokens=k, tree="dynamic", top_k=top_k, num_nodes=num_nodes)
    if method == "deer":
        return DEERDrafter(model, num_tokens=k, confidence=confidence)
    if method == "diffuspec":
        return DiffuSpecDrafter(model, causal=causal, eos_token_id=eos_token_id, num_tokens=k, cps=cps, adl=adl,
                                lattice=lattice, cps_config=cps_config, adl_config=adl_config, confidence=confidence)
    if method == "dflash":
        return DFlashDrafter(model, target, num_tokens=num_tokens, confidence=None if tree_nodes else confidence,
                             tree_nodes=tree_nodes, top_k=top_k, compress_to=compress_to, block=block,
                             draft_vocab=draft_vocab, lookup=lookup, lookup_alone=lookup_alone, tree_cut=tree_cut,
                             weights=weights or DRAFT_WEIGHTS)
    if method in FEATURE_METHODS:
        return FeatureDrafter(model, target, num_tokens=k, tree=tree, top_k=top_k, num_nodes=num_nodes,
                              compress_to=compress_to, weights=weights or DRAFT_WEIGHTS)
    raise ValueError(f"unknown method {method!r}; choose from {sorted(set(TEXT_METHODS) | set(VLM_METHODS))}")


NEEDS = {**{m: "causal" for m in CAUSAL_METHODS}, **{m: "diffusion" for m in DIFFUSION_METHODS},
         **{m: "feature" for m in FEATURE_METHODS}, **{m: "dflash" for m in BLOCK_METHODS}}  # each method's drafter
WHAT = {"causal": "a small causal LM drafter", "diffusion": "a diffusion LM drafter (DiffusionLM)",
        "feature": "a feature drafter (FeatureDraftModel or its directory)",
        "dflash": "a block-diffusion drafter (DFlashDraftModel or its directory)"}


def _check_drafter(method: str, model, tree) -> None:
    """The model fits the method (kind, trained method) and the tree option does not ask for another method."""
    need = NEEDS.get(method)
    if need is not None and drafter_kind(model) != need:
        got = "none" if model is None else type(model).__name__
        raise ValueError(f"method {method!r} needs {WHAT[need]}, got {got}")
    if need == "feature" and model.config.method != method:
        raise ValueError(f"the drafter was trained as {model.config.method!r}, not {method!r}")
    if need == "causal" and tree is not None and causal_method(tree) != method:
        raise ValueError(f"method {method!r} does not draft tree={tree!r}: that is method {causal_method(tree)!r}")


def zoo_diffuspec(causal) -> dict:
    """DiffuSpec's settings tuned on the zoo's code target, with ``causal`` (zoo:code-ngram) as its proxy."""
    return dict(causal=causal, cps_config=CPSConfig(lam=CPS_LAMBDA), adl_config=ZOO_ADL)


def engine(target, drafter: Drafter | None, **kwargs) -> SpeculativeGenerator | None:
    """The decoding loop over ``target`` with ``drafter``; None (the target's own generate) without one."""
    return SpeculativeGenerator(target, drafter, **kwargs) if drafter is not None else None


# ------------------------------------------------------------------------------------------------ image


def lattice_tree(depth: int) -> TreeTemplate:
    """The static tree for a semi-autoregressive drafter of ``depth`` slots: LANTERN_TREE's shape cut to it."""
    return TreeTemplate.full((2, 2, 1, 1, 1)[:depth]) if depth < 5 else LANTERN_TREE


def resolve_bound(method: str, delta: float | None, lam: float | None, lantern_k: int | None = None) -> dict:
    """The bound a method relaxes acceptance by and its neighbour count: LANTERN's δ or LANTERN++'s λ with
    ``lantern_k``, each defaulting to :data:`BOUND_DEFAULTS`; ``{}`` for the lossless methods. A setting the
    method does not use is an error, not silently dropped."""
    if delta is not None and method != "lantern":
        raise ValueError(f"delta (LANTERN's cap δ on the mass moved per candidate) does not apply to method "
                         f"{method!r}; it is used by method 'lantern' only")
    if lam is not None and method != "lantern++":
        raise ValueError(f"lam (LANTERN++'s multiplicative bound) does not apply to method {method!r}; "
                         "it is used by method 'lantern++' only")
    if lantern_k is not None and method not in BOUND_DEFAULTS:
        raise ValueError(f"lantern_k (latent neighbours that mass may move onto) does not apply to method "
                         f"{method!r}; it is used by methods 'lantern' and 'lantern++' only")
    given = check_options({k: IMAGE_OPTIONS[k] for k in ("delta", "lam", "lantern_k")},
                          {"delta": delta, "lam": lam, "lantern_k": lantern_k})  # types, ranges, finite values
    return {name: default if given[name] is None else given[name]
            for name, default in BOUND_DEFAULTS.get(method, {}).items()}


def tree_options(tree, num_tokens: int, top_k: int, num_nodes: int, sar: int = 1) -> dict:
    """Drafter keyword arguments for an image tree choice: ``"chain"`` (``num_tokens``, or a semi-autoregressive
    drafter's ``sar`` slots), ``"static"`` (LANTERN_TREE, or the SAR drafter's lattice), ``"dynamic"``
    (EAGLE-2), a TreeTemplate or its label (``TreeTemplate.from_label``: "2x1x1x1x1x1", "spine7+1")."""
    if tree == "chain":
        return dict(num_tokens=sar if sar > 1 else num_tokens)
    if tree == "static":
        return dict(tree=LANTERN_TREE if sar == 1 else lattice_tree(sar))
    if tree == "dynamic":
        return dict(num_tokens=5, tree="dynamic", top_k=top_k, num_nodes=num_nodes)
    if isinstance(tree, TreeTemplate):
        return dict(tree=tree)
    if isinstance(tree, str):  # a shape's label, as the image suite reports it ("2x1x1x1x1x1", "spine7+1")
        try:
            return dict(tree=TreeTemplate.from_label(tree))
        except ValueError as err:
            raise ValueError(f"tree must be 'chain', 'static', 'dynamic', a TreeTemplate or a shape's label: {err}") \
                from None
    raise ValueError(f"tree must be 'chain', 'static', 'dynamic', a TreeTemplate or a shape's label, got {tree!r}")


def image_drafter(guided_drafter=None, *, net: FeatureDraftModel | DFlashDraftModel | None = None, guided_target=None,
                  tree="static", num_tokens: int | None = 4, top_k: int = 4, num_nodes: int = 24,
                  coupling: str = "rejection") -> Drafter:
    """The drafter of the image methods (spec / lantern / lantern++): a small AR model already wrapped for CFG
    (``guided_drafter``), or a feature drafter ``net`` reading the guided target's features (a DFlash block
    drafter: ``tree="chain"``, its first ``num_tokens`` slots from a block of ``num_tokens`` + 1 positions, None: the
    whole block; ``"static"`` or ``"ddtree"``, the DDTree of its slot marginals, ``IMAGE_DFLASH_TREE``, under the Gumbel
    ``coupling`` ``IMAGE_DFLASH_GUMBEL_TREE``)."""
    if isinstance(net, DFlashDraftModel):
        if tree not in DFLASH_IMAGE_TREES:
            raise ValueError(f"the DFlash drafter drafts tree='chain' (its block) or 'ddtree' (a best-first tree of "
                             f"the block's slot marginals; 'static' is the same), not {tree_label(tree)!r}")
        if tree == "chain":  # a chain of n slots runs a block of n + 1 positions: no forward over slots it drops
            # (image-dflash drafts as well from a block of 9 as from its whole block of 16: on the image suite's 8
            # pictures tau 3.84 vs 3.83 under LANTERN++ lam 50 and 1.97 vs 2.00 lossless; on this 2-core CPU the
            # drafter's cost is its ops' fixed cost, so c_d stayed 0.38, a block of 9 spares compute elsewhere)
            return DFlashDrafter(net, guided_target, num_tokens=num_tokens, weights=DRAFT_WEIGHTS,
                                 block=None if num_tokens is None else min(num_tokens + 1, net.block_size))
        tree_settings = IMAGE_DFLASH_GUMBEL_TREE if coupling == "gumbel" else IMAGE_DFLASH_TREE
        return DFlashDrafter(net, guided_target, weights=DRAFT_WEIGHTS, **tree_settings)
    if net is not None:
        return FeatureDrafter(net, guided_target, **tree_options(tree, num_tokens, top_k, num_nodes,
                                                                 net.config.sar_tokens))
    return AutoregressiveDrafter(guided_drafter, adaptive=False, **tree_options(tree, num_tokens, top_k, num_nodes))


def check_image_method(method: str) -> None:
    if method not in IMAGE_METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {tuple(IMAGE_METHODS)}")


__all__ = ["METHODS", "TEXT_METHODS", "VLM_METHODS", "IMAGE_METHODS", "CAUSAL_METHODS", "DIFFUSION_METHODS",
           "FEATURE_METHODS", "BLOCK_METHODS", "NO_MODEL_METHODS", "IMAGE_DRAFTERS", "IMAGE_DRAFTER_MODELS", "DFLASH_IMAGE_TREES", "DRAFT_TOKENS", "CHAIN_CONFIDENCE", "CONFIDENT_CHAIN_TOKENS", "draft_length", "DYNAMIC_TREE", "DFLASH_TREE", "DFLASH_TREE_LOOKUP", "DFLASH_LOOKUP_ALONE", "DFLASH_LOOKUP_CUT", "IMAGE_DFLASH_TREE", "IMAGE_DFLASH_GUMBEL_TREE", "DRAFT_WEIGHTS", "CPS_LAMBDA", "ZOO_ADL",
           "BOUND_DEFAULTS", "LANTERN_TREE", "OPTIONS", "IMAGE_TREE", "IMAGE_CHAIN_TOKENS", "IMAGE_DRAFTER_DEFAULTS", "image_defaults", "take_options", "options_set", "check_applies", "wrong_method",
           "drafter_kind", "check_vocab", "check_feature", "causal_method", "NEEDS", "build_drafter", "zoo_diffuspec",
           "engine", "lattice_tree", "resolve_bound", "tree_options", "image_drafter", "check_image_method"]
