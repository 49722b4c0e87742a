"""The text/code benchmark on the zoo: held-out completion prompts, every text method side by side.

Methods: plain decoding, HF assisted generation and prompt lookup (the peers), the zoo's AR drafter
(chain), the DFlash block drafter ``code-dflash`` (a confident chain, a DDTree, the whole block), DEER (Stage I only and Stages I+II), DiffuSpec with CPS and ADL switched on and off, and the
CPS lattice tree. Each diffusion method is built fresh per run from the zoo (``code-deer``,
``code-deer-s1``, ``code-dlm``, ``code-ngram``)."""

from __future__ import annotations

from pathlib import Path

from ..loading import zoo_diffusion_lm
from ..registry import CHAIN_CONFIDENCE, DFLASH_LOOKUP_ALONE, DFLASH_LOOKUP_CUT, DFLASH_TREE, DFLASH_TREE_LOOKUP, \
    build_drafter, zoo_diffuspec
from ..zoo import code_data, load, zoo_home
from .batch_sweep import batch_sweep
from .bench import compare, used_factories

BASE_METHODS = ["plain", "mmspec-plain", "hf-assisted", "hf-prompt-lookup", "chain", "prompt-lookup"]
DIFFUSION_METHODS = ["deer-s1", "deer", "diffuspec", "diffuspec-no-cps", "diffuspec-no-adl", "diffuspec-no-cps-no-adl",
                     "diffuspec-lattice", "deer-lattice"]
# code-dflash: confident chain, DDTree, the DDTree with a prompt-lookup branch grafted on (DFLASH_TREE_LOOKUP), the
# same with long lookup continuations verified alone (DFLASH_LOOKUP_ALONE), and with the tree cut at a path
# probability (DFLASH_LOOKUP_CUT), the whole block; and the chain and the DDTree over blocks of 8 positions
# (DFlashDrafter's block=8)
BLOCK_METHODS = ["dflash", "dflash-tree", "dflash-tree-lookup", "dflash-lookup-alone", "dflash-lookup-cut",
                 "dflash-block", "dflash-b8", "dflash-tree-b8"]
SHORT_BLOCK = 8
FEATURE_METHODS = ["eagle-chain"]  # code-eagle: the autoregressive feature drafter the block drafter is up against
CODE_METHODS = BASE_METHODS + BLOCK_METHODS + FEATURE_METHODS + DIFFUSION_METHODS


EAGLE_CHAIN_TOKENS = 8  # as the VLM suite's feature chains


def zoo_root(home) -> Path:
    return Path(home) if home is not None else zoo_home()


def diffusion_factories(home: str | Path | None = None, deer_tokens: int = 8, diffuspec_tokens: int = 8,
                        context: str = "cache") -> dict:
    """Zero-argument drafter factories for the diffusion methods (models loaded once)."""
    entries = {}

    def get(name):
        if name not in entries:
            entries[name] = load(name, home)
        return entries[name]

    target = get("code-target")
    vocab = target.model.config.vocab_size
    eos = target.tokenizer.eos_token_id

    def dlm(name):
        return zoo_diffusion_lm(get(name), context=context, target_vocab_size=vocab)

    def deer(name):
        return lambda: build_drafter("deer", dlm(name), num_tokens=deer_tokens, confidence=CHAIN_CONFIDENCE)

    def diffuspec(name="code-dlm", cps=True, adl=True, lattice=False):
        def make():
            tuned = zoo_diffuspec(get("code-ngram").model if cps else None)
            return build_drafter("diffuspec", dlm(name), eos_token_id=eos, num_tokens=diffuspec_tokens, cps=cps,
                                 adl=adl, lattice=lattice, confidence=CHAIN_CONFIDENCE, **tuned)
        return make

    def dflash(**kw):
        return lambda: build_drafter("dflash", get("code-dflash").model, target=target.model, **kw)

    block = {}
    built = {n for n in ("code-dflash", "code-eagle") if (zoo_root(home) / n / "zoo.json").exists()}
    if "code-dflash" in built:  # a zoo built before the block drafter existed has none
        block = {"dflash": dflash(confidence=CHAIN_CONFIDENCE), "dflash-tree": dflash(**DFLASH_TREE),
                 "dflash-tree-lookup": dflash(**DFLASH_TREE_LOOKUP),
                 "dflash-lookup-alone": dflash(**DFLASH_LOOKUP_ALONE),
                 "dflash-lookup-cut": dflash(**DFLASH_LOOKUP_CUT),
                 "dflash-block": dflash(), "dflash-b8": dflash(confidence=CHAIN_CONFIDENCE, block=SHORT_BLOCK),
                 "dflash-tree-b8": dflash(**DFLASH_TREE, block=SHORT_BLOCK)}
    if "code-eagle" in built:
        block["eagle-chain"] = lambda: build_drafter("eagle", get("code-eagle").model, target=target.model,
                                                     num_tokens=EAGLE_CHAIN_TOKENS)
    return {
        **block,
        "deer-s1": deer("code-deer-s1"),
        "deer": deer("code-deer"),
        "diffuspec": diffuspec(),
        "diffuspec-no-cps": diffuspec(cps=False),
        "diffuspec-no-adl": diffuspec(adl=False),
        "diffuspec-no-cps-no-adl": diffuspec(cps=False, adl=False),
        "diffuspec-lattice": diffuspec(lattice=True),
        "deer-lattice": diffuspec("code-deer", adl=False, lattice=True),
    }


def code_prompts(tokenizer, num_prompts: int) -> list:
    prompts = code_data.completion_prompts(code_data.load_corpus(), "test", limit=num_prompts)
    return [tokenizer(p.prompt, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts]


def run_code_suite(methods: list[str] | None = None, num_prompts: int = 8, max_new_tokens: int = 64,
                   do_sample: bool = False, temperature: float = 0.6, repeats: int = 1, num_tokens: int | None = None,
                   deer_tokens: int = 8, diffuspec_tokens: int = 8, context: str = "cache",
                   home: str | Path | None = None, progress: bool = True) -> dict:
    target, draft = load("code-target", home), load("code-drafter", home)
    extra = diffusion_factories(home, deer_tokens, diffuspec_tokens, context)
    methods = methods or [m for m in CODE_METHODS if m in BASE_METHODS or m in extra]
    prompts = code_prompts(target.tokenizer, num_prompts)
    report = compare(target.model, draft.model, prompts, methods, max_new_tokens=max_new_tokens,
                     num_tokens=num_tokens, do_sample=do_sample, temperature=temperature, repeats=repeats,
                     progress=progress, extra=extra)  # all: an unknown name lists them
    report["config"].update(model="zoo:code-target", draft="zoo:code-drafter (AR) / zoo diffusion drafters",
                            prompts="held-out stdlib completion prompts", deer_tokens=deer_tokens,
                            diffuspec_tokens=diffuspec_tokens, dlm_context=context)
    return report


SWEEP_METHODS = ["mmspec-plain", "hf-assisted", "chain", "chain-auto", "prompt-lookup", "eagle-chain",
                 "eagle-chain-auto"]


def run_code_sweep(methods: list[str] | None, batch_sizes: list[int], num_prompts: int = 16,
                   max_new_tokens: int = 64, repeats: int = 1, num_tokens: int | None = None,
                   home: str | Path | None = None, progress: bool = True) -> dict:
    """The code suite's methods at several batch sizes (:mod:`mmspec.eval.batch_sweep`)."""
    target, draft = load("code-target", home), load("code-drafter", home)
    extra = diffusion_factories(home)
    methods = methods or [m for m in SWEEP_METHODS if m.removesuffix("-auto") in BASE_METHODS + list(extra)]
    prompts = code_prompts(target.tokenizer, max(num_prompts, max(batch_sizes)))
    sweep = batch_sweep(target.model, draft.model, prompts, methods, batch_sizes, max_new_tokens, num_tokens,
                        extra=used_factories(extra, methods), pad_id=target.tokenizer.pad_token_id,
                        repeats=repeats, progress=progress)
    sweep["config"].update(model="zoo:code-target", prompts_from="held-out stdlib completion prompts")
    return sweep


__all__ = ["SWEEP_METHODS", "run_code_sweep", "CODE_METHODS", "DIFFUSION_METHODS", "BLOCK_METHODS", "FEATURE_METHODS", "diffusion_factories", "run_code_suite", "code_prompts"]
