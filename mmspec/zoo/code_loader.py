"""Loading the code family's shipped models: the Llama code LMs (target and AR drafter), the diffusion
drafters (stock Llama weights run bidirectionally) and the token n-gram model. Building them is
:mod:`mmspec.zoo.code` / :mod:`mmspec.zoo.code_diffusion`."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from ..drafters.dflash_io import load_dflash
from ..drafters.feature_model import FeatureDraftModel
from ..drafters.ngram import NGramLM
from ..kernels.tree_attention import prefer_tree_attention
from .entry import ZooEntry
from .home import read_json

BASE_NAMES = ["code-target", "code-drafter"]
DIFFUSION_NAMES = ["code-dlm", "code-deer-s1", "code-deer", "code-ngram"]
DFLASH_NAMES = ["code-dflash"]
FEATURE_NAMES = ["code-eagle"]
NAMES = BASE_NAMES + DIFFUSION_NAMES + DFLASH_NAMES + FEATURE_NAMES


def load(name: str, path: Path) -> ZooEntry:
    if name in DFLASH_NAMES:
        return ZooEntry(name, load_dflash(path), PreTrainedTokenizerFast.from_pretrained(path),
                        read_json(path / "zoo.json"), path)
    if name in FEATURE_NAMES:
        return ZooEntry(name, FeatureDraftModel.from_pretrained(path).eval(),
                        PreTrainedTokenizerFast.from_pretrained(path), read_json(path / "zoo.json"), path)
    if name in DIFFUSION_NAMES:
        return _load_diffusion(name, path)
    return ZooEntry(name=name, model=_llama(path), tokenizer=PreTrainedTokenizerFast.from_pretrained(path),
                    config=read_json(path / "zoo.json"), path=path)


def _llama(path: Path):
    """A zoo Llama model in float32, on the tree attention where its grouped K/V heads make that faster."""
    return prefer_tree_attention(LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval())


def _load_diffusion(name: str, path: Path) -> ZooEntry:
    cfg = read_json(path / "zoo.json")
    tok = PreTrainedTokenizerFast.from_pretrained(path)
    if name == "code-ngram":
        return ZooEntry(name, NGramLM.from_pretrained(path), tok, cfg, path)
    return ZooEntry(name, _llama(path), tok, cfg, path)


__all__ = ["BASE_NAMES", "DIFFUSION_NAMES", "DFLASH_NAMES", "FEATURE_NAMES", "NAMES", "load"]
