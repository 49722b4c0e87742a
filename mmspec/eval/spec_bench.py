"""Spec-Bench answer files: one jsonl per method, in the layout Spec-Bench's ``evaluation/eval.py`` writes, so its
own ``evaluation/speed.py`` (speedup, mean accepted tokens) and ``evaluation/equal.py`` (greedy equality) run on
an ``mmspec eval`` run unchanged.

Each line is one question: ``question_id``, ``category``, ``answer_id``, ``model_id``, ``tstamp`` and
``choices[0]`` with, per turn, ``turns`` (the answer text), ``decoding_steps`` (target forwards), ``new_tokens``,
``wall_time`` (the median seconds the report uses), and ``accept_lengths`` (tokens per target forward, the
prefill's one included, so their mean is the report's τ; empty for HF's assisted methods, whose steps HF does not
report).

``speed.py`` counts the *baseline's* tokens from its text as ``len(tokenizer(text).input_ids) - 1``, assuming a
tokenizer that puts one BOS in front. ``tokenizer/`` next to the files is the target's tokenizer made to do
exactly that when it does not already, so ``--tokenizer-path <run>/spec_bench/tokenizer`` counts every token.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
import uuid
from pathlib import Path

from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer

from .aggregate import question_id

SUITES = ("code", "chat")  # the text suites Spec-Bench's files describe


def answer_lines(records: list[dict], method: str, tokenizer, model_id: str) -> list[dict]:
    """One Spec-Bench answer per question, its turns in order."""
    questions: dict[str, list[dict]] = {}
    for r in records:
        if r["method"] == method and "new_ids" in r:
            questions.setdefault(question_id(r), []).append(r)
    lines = []
    for qid, turns in questions.items():
        turns.sort(key=lambda r: r["item"])
        choice = {"index": 0, "turns": [], "decoding_steps": [], "new_tokens": [], "wall_time": [],
                  "accept_lengths": []}
        for r in turns:
            choice["turns"].append(tokenizer.decode(r["new_ids"], skip_special_tokens=True))
            choice["decoding_steps"].append(r["target_forwards"] if r["target_forwards"] is not None else
                                            r["new_tokens"] if method == "plain" else None)
            choice["new_tokens"].append(r["new_tokens"])
            choice["wall_time"].append(r["seconds"])
            choice["accept_lengths"] += r["accept_lengths"] or ([1] * r["new_tokens"] if method == "plain" else [])
        lines.append({"question_id": qid, "category": turns[0]["category"], "answer_id": uuid.uuid4().hex[:22],
                      "model_id": model_id, "choices": [choice], "tstamp": time.time()})
    return lines


def _extra_tokens(tokenizer) -> int:
    """How many special tokens the tokenizer adds to a text by default."""
    return len(tokenizer("a").input_ids) - len(tokenizer("a", add_special_tokens=False).input_ids)


def save_counting_tokenizer(tokenizer, folder: Path) -> bool:
    """Save the tokenizer ``speed.py`` should count with: ``tokenizer`` itself when it puts exactly one special
    token in front of a text, else a copy whose post-processor prepends one (its BOS, else its EOS). Checked the
    way speed.py loads it (``AutoTokenizer.from_pretrained``); False (nothing kept) when that cannot be had."""
    tok = tokenizer
    if _extra_tokens(tokenizer) != 1:
        front = tokenizer.bos_token or tokenizer.eos_token
        if getattr(tokenizer, "backend_tokenizer", None) is None or front is None or _extra_tokens(tokenizer) != 0:
            return False
        tok = copy.deepcopy(tokenizer)
        tok.backend_tokenizer.post_processor = TemplateProcessing(
            single=f"{front} $A", pair=f"{front} $A $B",
            special_tokens=[(front, tokenizer.convert_tokens_to_ids(front))])
    tok.save_pretrained(folder)
    if _extra_tokens(AutoTokenizer.from_pretrained(folder, local_files_only=True)) == 1:
        return True
    shutil.rmtree(folder)
    return False


def write_answer_files(out: Path, suite: str, records: list[dict], tokenizer, target: str, methods: list[str],
                       base: str = "plain") -> dict:
    """``out/<suite>/<method>.jsonl`` for every method with ids, ``out/tokenizer/`` and a README; returns what
    was written (for results.json)."""
    folder = out / suite
    folder.mkdir(parents=True, exist_ok=True)
    name = target.replace("zoo:", "").replace("/", "_").strip("_") or "target"
    files = {}
    for m in methods:
        lines = answer_lines(records, m, tokenizer, f"{name}-{m}")
        if not lines:
            continue
        path = folder / f"{m}.jsonl"
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        files[m] = str(path.relative_to(out.parent))
    tok_dir = out / "tokenizer"
    counts = tok_dir.exists() or save_counting_tokenizer(tokenizer, tok_dir)
    note = "" if counts else (" This target's tokenizer could not be made to prepend one token, so "
                                            "speed.py undercounts the baseline by one token per answer.")
    (out / "README.md").write_text(
        "# Spec-Bench answer files\n\n"
        "One file per method under a folder per suite (code, chat), in Spec-Bench's answer layout. With a "
        "Spec-Bench checkout, for suite SUITE and method METHOD:\n\n"
        "```\n"
        f"python evaluation/speed.py --file-path SUITE/METHOD.jsonl --base-path SUITE/{base}.jsonl "
        "--tokenizer-path tokenizer\n"
        f"python evaluation/equal.py --file-path SUITE/ --jsonfile1 {base}.jsonl --jsonfile2 METHOD.jsonl\n"
        "```\n\n"
        "(speed.py's `__main__` runs its `get_mean_speedup` over hard-coded paths: call "
        "`speed(file, base_file, tokenizer_path, task='overall')` from Python.)\n\n"
        "`wall_time` is the median seconds per prompt of the report; `accept_lengths` counts the prefill's token, "
        "so its mean is the report's τ. speed.py's speedup is a mean of per-question tokens/s, the report's "
        "`specbench_speedup`; the report's headline speedup is a ratio of total times." + note + "\n")
    return {"files": files, "tokenizer": str(tok_dir.relative_to(out.parent)) if counts else None}


__all__ = ["SUITES", "answer_lines", "save_counting_tokenizer", "write_answer_files"]
