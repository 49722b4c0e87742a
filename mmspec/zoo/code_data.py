"""Code corpus of the zoo: the running interpreter's standard library, split by module, a byte-level
BPE tokenizer trained on the training split, and HumanEval-style completion prompts from held-out
modules (signature + docstring -> body).

The deep code target also trains on the pure-Python sources of a fixed list of installed packages
(:data:`EXTRA_PACKAGES`, dependencies every mmspec install has): the standard library's training split
is 3.2M tokens, which a 16-layer model memorises (measured: its grown layers stayed unused and the
held-out loss barely moved). Validation and test stay the standard library's held-out modules, so
held-out figures compare with the earlier zoo's."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import os
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .common import stable_bucket

SPECIAL_TOKENS = ["<pad>", "<eos>", "<mask>", "<image>"]
PAD, EOS, MASK, IMAGE = SPECIAL_TOKENS


CORPUS_ENV = "MMSPEC_CODE_CORPUS"


def stdlib_root() -> Path:
    """The standard library the corpus is read from: the running interpreter's, or a copy of another's named by
    ``$MMSPEC_CODE_CORPUS`` (so a build on a machine with another Python trains on the same corpus and holds out
    the same modules as the shipped zoo)."""
    override = os.environ.get(CORPUS_ENV)
    if override:
        root = Path(override)
        if not root.is_dir():
            raise ValueError(f"${CORPUS_ENV}={override} is not a directory (a copy of a Python standard library)")
        return root
    return Path(sysconfig.get_paths()["stdlib"])


def _is_test_path(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in ("test", "tests", "idle_test") or p.startswith("test_") for p in parts)


def list_modules(root: Path | None = None) -> list[str]:
    """Relative paths of the stdlib's .py files (tests and site-packages excluded), sorted."""
    root = root or stdlib_root()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("site-packages/") or "/site-packages/" in rel or _is_test_path(rel):
            continue
        out.append(rel)
    return out


def split_of(rel: str) -> str:
    """train / val / test by a stable hash of the module path (held-out modules never seen in training)."""
    b = stable_bucket(rel)
    return "train" if b < 90 else ("val" if b < 95 else "test")


@dataclass
class CodeCorpus:
    root: Path
    files: dict[str, list[str]]  # split -> relative paths

    def texts(self, split: str, limit: int | None = None) -> list[str]:
        return read_texts([self.root / rel for rel in self.files[split][:limit]])


def load_corpus(micro: bool = False, root: Path | None = None) -> CodeCorpus:
    root = root or stdlib_root()
    files: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for rel in list_modules(root):
        files[split_of(rel)].append(rel)
    if micro:
        files = {k: v[: {"train": 40, "val": 6, "test": 12}[k]] for k, v in files.items()}
    return CodeCorpus(root, files)


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE with the zoo's special tokens at ids 0..3, wrapped as a HF fast tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, mask_token=MASK,
                                   additional_special_tokens=[IMAGE])


@dataclass
class CompletionPrompt:
    module: str
    name: str
    prompt: str  # signature + docstring (no trailing newline)
    reference: str  # the original body


def completion_prompts(corpus: CodeCorpus, split: str = "test", limit: int | None = None,
                       min_body_lines: int = 3, max_body_lines: int = 30) -> list[CompletionPrompt]:
    """Top-level functions with a docstring from held-out modules, cut after the docstring."""
    out = []
    for rel in corpus.files[split]:
        try:
            src = (corpus.root / rel).read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        lines = src.splitlines()
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
                continue
            doc = node.body[0]
            if not (isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None), ast.Constant)
                    and isinstance(doc.value.value, str)) or len(node.body) < 2:
                continue
            start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
            body_lines = lines[doc.end_lineno: node.end_lineno]
            if not min_body_lines <= len(body_lines) <= max_body_lines:
                continue
            # no trailing newline: byte-level BPE merges "\n" with the next line's indentation, so a
            # prompt ending in a bare "\n" would tell the model the function is over
            prompt = "\n".join(lines[start: doc.end_lineno])
            out.append(CompletionPrompt(rel, node.name, textwrap.dedent(prompt), "\n".join(body_lines) + "\n"))
            if limit is not None and len(out) >= limit:
                return out
    return out


def completion_training_prompts(corpus: CodeCorpus, split: str = "train", per_function: int = 3, seed: int = 0,
                                max_body_lines: int = 120) -> list[str]:
    """Prompts of the completion suite's kind to train drafters on (their answers are the target's): every
    documented function of ``split`` cut after its docstring, as the suite cuts it, and after up to
    ``per_function`` − 1 random lines of its body (drawn from ``seed``), so that a drafter also sees the target
    continue a body it has begun. No trailing newline, as in :func:`completion_prompts`."""
    import random

    rng = random.Random(seed)
    out = []
    for p in completion_prompts(corpus, split, min_body_lines=2, max_body_lines=max_body_lines):
        out.append(p.prompt)
        body = p.reference.splitlines()
        ends = [j for j in range(1, len(body)) if body[j - 1].strip()]  # a cut after a blank line would end in "\n"
        for j in sorted(rng.sample(ends, min(per_function - 1, len(ends)))):
            out.append(p.prompt + "\n" + "\n".join(body[:j]))
    return out


# Installed with torch / transformers / accelerate / timm (so present wherever mmspec is): pure-Python,
# varied, and without the near-duplicate generated files of transformers' modeling code.
EXTRA_PACKAGES = ("sympy", "networkx", "numpy", "mpmath", "jinja2", "huggingface_hub", "fsspec", "accelerate",
                  "timm", "requests", "urllib3", "packaging", "tqdm", "filelock", "safetensors")


def extra_training_files(packages: tuple[str, ...] = EXTRA_PACKAGES) -> tuple[list[Path], dict[str, str]]:
    """Non-test ``.py`` files of ``packages`` (sorted, duplicates by content dropped) and the version of
    each package found: the versions are recorded in ``metrics.json`` because they fix the corpus."""
    files, seen, versions = [], set(), {}
    for pkg in packages:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "unknown"
        root = Path(list(spec.submodule_search_locations)[0])
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if _is_test_path(rel) or "testing" in rel.split("/"):
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                files.append(path)
    return files, versions


# Installed wherever mmspec is (its own dependencies and theirs) but *not* in the target's corpus: their documented
# functions are prompts the target never trained on, the way HumanEval's are.
UNSEEN_PACKAGES = ("scipy", "torch", "transformers", "diffusers", "IPython", "jedi", "docutils", "pygments", "rich",
                   "click", "pydantic", "yaml", "PIL", "matplotlib", "setuptools", "pip", "typer", "attr",
                   "markdown_it", "einops")


def package_completion_prompts(packages: tuple[str, ...], limit: int, seed: int, per_package: int | None = None,
                               max_body_lines: int = 120) -> list[str]:
    """Up to ``limit`` completion prompts (documented top-level functions cut after the docstring, as the suite cuts
    them) from the installed ``packages``' non-test files, drawn at random from ``seed`` with at most ``per_package``
    from any one package (so the largest, e.g. torch, does not make up the set). The same installs give the same
    prompts; packages not installed give none."""
    import random

    by_package: dict[str, list[str]] = {}
    for pkg in packages:
        files, _ = extra_training_files((pkg,))
        for path in files:
            one = CodeCorpus(path.parent, {"train": [path.name]})
            by_package.setdefault(pkg, []).extend(
                p.prompt for p in completion_prompts(one, "train", min_body_lines=2, max_body_lines=max_body_lines))
    rng = random.Random(seed)
    pool = []
    for pkg in sorted(by_package):
        texts = sorted(set(by_package[pkg]))
        rng.shuffle(texts)
        pool.extend(texts[:per_package])
    rng.shuffle(pool)
    return pool[:limit]


def read_texts(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        try:
            out.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return out


TOKENIZER_DIR = "code-tokenizer"


def ensure_tokenizer(home: Path, micro: bool = False):
    """The zoo's shared tokenizer (code LM, VLM language model): loaded from ``<home>/code-tokenizer``,
    trained and saved there first if missing (vocab 4096; 512 for micro builds)."""
    path = Path(home) / TOKENIZER_DIR
    if (path / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(path)
    corpus = load_corpus(micro=micro)
    tok = train_tokenizer(corpus.texts("train"), 512 if micro else 4096)
    tok.save_pretrained(path)
    return tok
