"""The declared options of every route and command: type, range, whether it must be finite, the methods it applies
to, and whether it is a sampling setting. One validator, :func:`check_options`, serves the Python API keywords
(``mmspec.pipeline``'s options and the front-ends' ``generate``), the command-line flags (argparse ``type=`` from
:meth:`Option.parse`, then :func:`check_args`) and ``mmspec eval`` configs (:class:`mmspec.eval.config.EvalConfig`).

A value of the wrong type (``do_sample="false"``, ``num_prompts=1.5``) or out of range (``lam=nan``,
``scenes=0``) is a ValueError naming the option. A setting given for a method it does not apply to
(``num_tokens`` for plain AR) is refused too, except the sampling settings (``temperature``, ``top_k``,
``top_p``) under greedy decoding: Hugging Face's ``generate`` ignores them there, and so does mmspec, which then
records them as ``None`` (not applied) in the output's config.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
from dataclasses import dataclass

from .verifiers.coupling import COUPLINGS

_UNSET = object()


@dataclass(frozen=True)
class Option:
    """One setting: ``kind`` is ``bool``, ``int``, ``float``, ``str`` or ``object`` (anything: a model, a tree);
    ``ge`` / ``gt`` / ``le`` / ``lt`` bound numbers (floats must also be finite); ``none``: None is allowed (it
    means "unset": the method's default); ``choices``: the allowed strings; ``methods``: the methods it applies to
    (None: every method); ``sampling``: ignored under greedy decoding, as HF does."""

    name: str
    kind: type = object
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    none: bool = True
    choices: tuple | None = None
    methods: tuple | None = None
    sampling: bool = False
    help: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def _range(self) -> str:
        parts = [f">= {self.ge:g}" if self.ge is not None else None, f"> {self.gt:g}" if self.gt is not None else None,
                 f"<= {self.le:g}" if self.le is not None else None, f"< {self.lt:g}" if self.lt is not None else None]
        return " and ".join(p for p in parts if p)

    def describe(self) -> str:
        what = {bool: "true or false", int: "an int", float: "a finite number", str: "a string"}.get(self.kind, "")
        rng = self._range()
        return " ".join(p for p in (what, rng) if p) + (" (or unset)" if self.none and what else "")

    def check(self, value, name: str | None = None):
        """``value`` checked (an int is taken for a float option); raises ValueError naming ``name``."""
        name = name or self.name
        if value is None:
            if self.none:
                return None
            raise ValueError(f"{name} must be {self.describe()}, got None")
        if self.kind is object:
            return value
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false (a bool), got {value!r} ({type(value).__name__})")
            return value
        if self.kind is str:
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {value!r} ({type(value).__name__})")
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"{name} must be one of {list(self.choices)}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
                (self.kind is int and not isinstance(value, numbers.Integral)):
            raise ValueError(f"{name} must be {self.describe()}, got {value!r} ({type(value).__name__})")
        if self.kind is float:
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        else:
            value = int(value)
        if (self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt) or \
                (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt):
            raise ValueError(f"{name} must be {'an int ' if self.kind is int else ''}{self._range()}, got {value!r}")
        return value

    def applies(self, method: str | None) -> bool:
        return self.methods is None or method is None or method in self.methods

    def parse(self, text: str):
        """The argparse ``type=`` of this option's flag: the text as its kind (ranges are checked by
        :func:`check_args`, so every fault is one ``mmspec: error:`` line)."""
        if self.kind is int:
            return int(text)
        if self.kind is float:
            return float(text)
        return text


def table(*options: Option) -> dict[str, Option]:
    return {o.name: o for o in options}


def check_options(declared: dict[str, Option], values: dict, *, method: str | None = None, given=None,
                  do_sample: bool | None = None, where: str = "", names: dict | None = None,
                  kind: str = "method") -> dict:
    """``values`` checked against ``declared``: an unknown name, a wrong type or an out-of-range value is a
    ValueError naming it. ``given`` (default: the names of ``values`` whose value is not None) must apply to
    ``method``, except sampling settings under greedy (``do_sample`` False), which come back as None (ignored, as HF
    does). ``names`` maps an option to the name the caller knows it by (a CLI flag)."""
    names = names or {}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise ValueError(f"{where or 'this call'} got unknown option(s) {unknown}; it takes {sorted(declared)}")
    out = {k: declared[k].check(v, names.get(k, k)) for k, v in values.items()}
    given = [k for k, v in out.items() if v is not None] if given is None else list(given)
    for k in given:
        opt = declared[k]
        if opt.sampling and do_sample is False:
            continue
        if not opt.applies(method):
            users = ", ".join(repr(m) for m in opt.methods)
            raise ValueError(f"{names.get(k, k)} does not apply to {kind} {method!r}; it is used by "
                             f"{kind if len(opt.methods) == 1 else kind + 's'} {users} only")
    if do_sample is False:
        out.update({k: None for k in out if declared[k].sampling})
    return out


def check_args(args: argparse.Namespace, declared: dict[str, Option], *, method: str | None = None,
               given=None, kind: str = "method") -> None:
    """A command's parsed flags checked against their declarations (the messages name the flags)."""
    values = {k: getattr(args, k) for k in declared if hasattr(args, k)}
    given = [k for k in (given if given is not None else values) if values.get(k) is not None]
    check_options({k: declared[k] for k in values}, values, method=method, given=given,
                  names={k: declared[k].flag for k in values}, kind=kind)


def add_option(parser: argparse.ArgumentParser, opt: Option, default=_UNSET, help: str | None = None, **kw):
    """A flag declared by ``opt``: its type parses as the option's kind; the help names the default."""
    if opt.kind is bool:
        raise ValueError("switches are store_true / store_const flags, not typed options")
    extra = dict(choices=list(opt.choices)) if opt.choices else {}
    return parser.add_argument(opt.flag, type=opt.parse, default=None if default is _UNSET else default,
                               help=help if help is not None else opt.help, **extra, **kw)


# ------------------------------------------------------------------------------------------------ declarations

# the text and VLM front-ends' generate (and SpeculativeGenerator.generate's sampling arguments)
GENERATE = table(
    Option("max_new_tokens", int, ge=1, none=False, help="new tokens per prompt"),
    Option("do_sample", bool, none=False, help="sample (default: greedy)"),
    Option("temperature", float, ge=0, sampling=True, help="sampling temperature (> 0 when sampling)"),
    Option("top_k", int, ge=0, sampling=True, help="keep the k likeliest tokens when sampling (0 or unset: off)"),
    Option("top_p", float, gt=0, le=1, sampling=True, help="nucleus sampling mass (unset: off)"),
    Option("seed", int, help="seed of the call's torch.Generator"),
    Option("stop_at_eos", bool, none=False, help="stop a row at EOS"),
    Option("method", str, help="the method for this call"),
    Option("coupling", str, choices=COUPLINGS, none=False, sampling=True,
           help="sampling: p/q rejection, or the Gumbel-max coupling (the same tokens as plain sampling for a seed)"),
)


def check_sampling(do_sample, temperature, top_k, top_p, where: str = "generate") -> dict:
    """The sampling arguments checked; under greedy the sampling settings come back as None (HF ignores them;
    temperature 0 is greedy's too). When sampling, the temperature must be > 0 (None: 1.0)."""
    out = check_options(GENERATE, dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p),
                        do_sample=do_sample, where=where)
    if out["do_sample"]:
        if out["temperature"] is None:
            out["temperature"] = 1.0
        if out["temperature"] <= 0:
            raise ValueError(f"temperature must be > 0 when sampling (do_sample=True), got {out['temperature']}")
    return out


def check_generate(where: str, **values) -> dict:
    """A text or VLM ``generate`` call's settings (:data:`GENERATE`) checked; under greedy the sampling settings
    come back as None, which is what the output's config records (not applied)."""
    sampling = {k: values.pop(k) for k in ("do_sample", "temperature", "top_k", "top_p") if k in values}
    # (the other sampling settings, the coupling, are None under greedy as well)
    out = check_options(GENERATE, values, where=where, **({"do_sample": sampling["do_sample"]}
                                                          if "do_sample" in sampling else {}))
    if sampling:
        out.update(check_sampling(where=where, **sampling))
    return out


CHAIN_METHODS = ("chain", "dynamic", "prompt-lookup", "deer", "diffuspec", "dflash", "eagle", "msd", "flash")
FEATURE = ("msd", "flash", "eagle")
IMAGE_SPEC = ("spec", "lantern", "lantern++")  # the image methods that draft

# mmspec.pipeline's **options per route (construction): which methods each drafting setting applies to
ADAPTIVE_HELP = ("draft only where it pays: each step drafts or verifies the root alone, whichever the call's own "
                 "measurements say emits more tokens per second (mmspec.drafters.AdaptiveDrafter); unset: in greedy "
                 "calls only (a seed then still fixes a sampled output), true: in every call, false: never")
DFLASH_OPTIONS = (  # the block drafter's own settings, the same on the text and VLM routes
    Option("tree_nodes", int, ge=1, methods=("dflash",), help="a DDTree's node budget"),
    Option("block", int, ge=2, methods=("dflash",),
           help="run DFlash blocks of this many positions instead of the drafter's whole block"),
    Option("draft_vocab", object, methods=("dflash",),
           help="token ids the DFlash drafter may draft (its LM head runs over those rows alone)"),
    Option("lookup", int, ge=1, methods=("dflash",),
           help="graft a prompt-lookup branch of up to this many tokens onto the DFlash DDTree (greedy calls)"),
    Option("lookup_alone", int, ge=1, methods=("dflash",),
           help="draft the lookup branch alone, without the block drafter, on steps where every row has one of at "
                "least this many tokens (needs lookup)"),
    Option("tree_cut", float, gt=0, lt=1, methods=("dflash",),
           help="stop growing the DFlash DDTree at prefixes less probable than this (a tree as large as the "
                "drafter's confidence; needs tree_nodes)"),
    Option("weights", str, choices=("float", "int8", "auto"), methods=("dflash",) + FEATURE,
           help="what a DFlash or feature drafter's products compute with: float, int8 weight-only (a CPU), or auto "
                "(int8 where the device has the kernel and the drafter is large enough to pay; the default)"),
)
ROUTE_OPTIONS = {
    "text": table(
        Option("num_tokens", int, ge=1, methods=CHAIN_METHODS, help="draft length (tokens per chain or block)"),
        Option("confidence", float, ge=0, le=1, methods=("chain", "deer", "diffuspec", "dflash"),
               help="stop a chain where the drafter's confidence falls below it (None: draft every chain whole)"),
        Option("tree", object, methods=("tree", "dynamic", "eagle"), help="a TreeTemplate or 'dynamic'"),
        Option("top_k", int, ge=1, none=False, methods=("dynamic", "dflash", "eagle"),
               help="candidates per node of a dynamic tree / DDTree"),
        Option("num_nodes", int, ge=1, methods=("dynamic", "eagle"), help="nodes a dynamic tree keeps"),
        Option("causal", object, methods=("diffuspec",), help="DiffuSpec's causal proxy"),
        Option("cps", bool, none=False, methods=("diffuspec",), help="DiffuSpec's causal path search"),
        Option("adl", bool, none=False, methods=("diffuspec",), help="DiffuSpec's adaptive draft length"),
        Option("lattice", bool, none=False, methods=("diffuspec",), help="DiffuSpec drafts a lattice tree"),
        Option("cps_config", object, methods=("diffuspec",)),
        Option("adl_config", object, methods=("diffuspec",)),
        *DFLASH_OPTIONS,
        Option("adaptive", bool, help=ADAPTIVE_HELP),
    ),
    "vlm": table(
        Option("num_tokens", int, ge=1, methods=CHAIN_METHODS, help="draft length (tokens per chain)"),
        Option("tree", object, methods=("tree", "dynamic") + FEATURE, help="a TreeTemplate or 'dynamic'"),
        Option("top_k", int, ge=1, none=False, methods=("dynamic", "dflash") + FEATURE,
               help="candidates per node of a dynamic tree / DDTree"),
        Option("num_nodes", int, ge=1, methods=("dynamic",) + FEATURE, help="nodes a dynamic tree keeps"),
        Option("compress_to", int, ge=1, methods=("flash", "dflash"),
               help="FLASH / a DFlash drafter with visual queries: entries per image in the drafter's context"),
        Option("confidence", float, ge=0, le=1, methods=("dflash",),
               help="stop a DFlash chain where the drafter's confidence falls below it (None: the whole block)"),
        *DFLASH_OPTIONS,
        Option("adaptive", bool, help=ADAPTIVE_HELP),
    ),
}
# the image generators' generate (and the image routes' options)
IMAGE = table(
    Option("cfg_scale", float, none=False, help="classifier-free guidance scale"),
    Option("temperature", float, ge=0, none=False, help="sampling temperature (0: greedy)"),
    Option("do_sample", bool, none=False, help="Janus: sample (default: greedy)"),
    Option("lantern_k", int, ge=1, methods=("lantern", "lantern++"),
           help="LANTERN / LANTERN++: latent neighbours per code that mass may move onto"),
    Option("delta", float, ge=0, le=1, methods=("lantern",), help="LANTERN's cap δ on the mass moved per candidate"),
    Option("lam", float, ge=1, methods=("lantern++",), help="LANTERN++'s multiplicative bound λ"),
    Option("tree", object, methods=IMAGE_SPEC, help="chain, static, dynamic, a TreeTemplate or its label"),
    Option("num_tokens", int, ge=1, methods=IMAGE_SPEC, help="chain length"),
    Option("drafter", str, methods=IMAGE_SPEC, help="ar, feature, sar or none"),
    Option("seed", int),
    Option("measure_output_tv", object, methods=IMAGE_SPEC),
    Option("method", str),
    Option("decode", bool, none=False),
    Option("coupling", str, choices=COUPLINGS, none=False, methods=("ar", "spec"),
           help="sampling: p/q rejection, or the Gumbel-max coupling (spec gives plain AR's very picture for a seed)"),
)
ROUTE_OPTIONS["image"] = {**{k: IMAGE[k] for k in ("cfg_scale", "temperature", "lantern_k", "delta", "lam", "tree",
                                                  "num_tokens")},
                          **table(Option("vq", object), Option("feature_drafter", object),
                                  Option("sar_drafter", object))}
ROUTE_OPTIONS["janus"] = {k: IMAGE[k] for k in ("cfg_scale", "do_sample", "temperature", "lantern_k", "delta", "lam",
                                                "tree", "num_tokens", "decode")}


def check_image_call(values: dict, method: str, given=None, where: str = "generate") -> dict:
    """An image generator's settings for ``method``; a drafting setting given to plain AR (or a bound to the
    method that does not use it) is refused."""
    return check_options(IMAGE, values, method=method, given=given, where=where)


# `mmspec train ...` flags (each command checks its own further combinations)
TRAIN = table(
    Option("scenes", int, ge=1, help="zoo target only: training scenes (unset: 4096)"),
    Option("stage1_steps", int, ge=0, none=False), Option("stage2_steps", int, ge=0, none=False),
    Option("steps", int, ge=1, none=False), Option("samples", int, ge=1, none=False),
    Option("val_samples", int, ge=1, none=False), Option("batch_size", int, ge=1, none=False),
    Option("generate", int, ge=8), Option("max_new_tokens", int, ge=1, none=False),
    Option("layers", int, ge=1, none=False), Option("block_size", int, ge=2, none=False),
    Option("anchors", int, ge=1, none=False), Option("mask_token_id", int, ge=0),
    Option("compress_tokens", int, ge=1, none=False), Option("sar_tokens", int, ge=1, none=False),
    Option("visual_queries", int, ge=0, none=False),
    Option("lr", float, gt=0, none=False), Option("kl_weight", float, ge=0, none=False),
    Option("budget_s", float, gt=0, none=False), Option("checkpoint_every", float, ge=0, none=False),
    Option("cfg_scale", float, ge=0, none=False), Option("seed", int, none=False),
)

# `mmspec bench` flags; ``methods`` here names the suites (``--suite``) a flag belongs to
BENCH = table(
    Option("prompts", int, ge=1, none=False), Option("max_new_tokens", int, ge=1, none=False),
    Option("num_tokens", int, ge=1), Option("repeats", int, ge=1, none=False), Option("seed", int, none=False),
    Option("temperature", float, gt=0, none=False),
    Option("draft_layers", int, ge=1, none=False, methods=("models",)),
    Option("prompt_length", int, ge=4, methods=("models",)),
    Option("model", str, methods=("models",)), Option("draft", str, methods=("models",)),
    Option("deer_tokens", int, ge=1, none=False, methods=("code",)),
    Option("dlm_context", str, methods=("code",)),
    Option("vlm_prompts", str, methods=("vlm",)),
    Option("per_class", int, ge=1, none=False, methods=("image",)),
    Option("no_sweep", bool, none=False, methods=("image",)),
    Option("device", str, methods=("code", "vlm", "image")),
)

__all__ = ["BENCH", "Option", "table", "check_options", "check_args", "add_option", "GENERATE", "check_sampling", "check_generate",
           "ROUTE_OPTIONS", "IMAGE", "check_image_call", "TRAIN"]
