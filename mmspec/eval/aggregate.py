"""Per-prompt records -> the figures of a report, by method and by category.

Every figure is a ratio of sums over the records it covers, so the same code summarises one process, one
category, or the merged records of several processes (``accelerate launch``):

* speedup = Σ seconds of the base method (plain decoding / plain AR) / Σ seconds of the method, over the same
  prompts. Each prompt's base and method times come from the same process, so a merged speedup is a
  time-weighted mean of the shards' own speedups;
* τ = Σ new tokens / Σ (row, target forward) pairs — with one prompt per call, new tokens / target forwards;
* tokens/s = Σ new tokens / Σ seconds; exact = share of prompts equal to the base's greedy output;
* drafter share = Σ drafter time / Σ (drafter + verify) time;
* accepted-length histogram = counts over verification steps (the prefill's one token left out).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .cost_model import cost_model


def summarise(records: list[dict], base: str) -> list[dict]:
    """One row per method (in first-seen order)."""
    methods = list(dict.fromkeys(r["method"] for r in records))
    base_by_item = {r["item"]: r["seconds"] for r in records if r["method"] == base}
    rows = []
    for m in methods:
        recs = [r for r in records if r["method"] == m]
        secs = sum(r["seconds"] for r in recs)
        new = sum(r["new_tokens"] for r in recs)
        base_secs = sum(base_by_item[r["item"]] for r in recs if r["item"] in base_by_item)
        fwd = [r for r in recs if r.get("row_forwards") is not None]
        rows_fwd = sum(r["row_forwards"] for r in fwd)
        draft = sum(r["draft_time"] or 0.0 for r in fwd)
        verify = sum(r["verify_time"] or 0.0 for r in fwd)
        exact = [r["exact"] for r in recs if r.get("exact") is not None]
        tau = new / rows_fwd if fwd and rows_fwd else (1.0 if m == base else None)
        # verification steps only: a record is one prompt (batch 1), whose first entry is the prefill's token
        hist = Counter(n for r in recs for n in (r.get("accept_lengths") or [])[1:])
        rows.append({
            "method": m, "prompts": len(recs), "seconds": secs, "new_tokens": new,
            "target_forwards": sum(r["target_forwards"] for r in fwd) if fwd else None,
            "row_forwards": rows_fwd if fwd else None, "tau": tau,
            "speedup": base_secs / secs if secs > 0 and base_by_item else None,
            "tokens_per_s": new / secs if secs > 0 else None,
            "exact": sum(exact) / len(exact) if exact else None,
            "draft_share": draft / (draft + verify) if draft + verify > 0 else None,
            "accept_hist": {int(k): v for k, v in sorted(hist.items())},
            "slot_acceptance": slot_acceptance(hist),
            **latency_percentiles(recs),
            "specbench_speedup": specbench_speedup(records, m, base),
        })
    for row in rows:
        row["flags"] = measurement_flags(row, [r for r in records if r["method"] == row["method"]],
                                         row["method"] == base)
    return rows


SPEEDUP_SLACK = 1.25  # a speedup above τ × this is not what drafting can give (see measurement_flags)
ROUND_SPREAD = 0.30  # timed rounds whose totals differ by more than this are flagged


def measurement_flags(row: dict, recs: list[dict], is_base: bool) -> list[str]:
    """What makes a row's speedup untrustworthy, in words (empty when nothing does):

    * a speedup above τ × 1.25: each target forward of a speculative step costs at least about one plain step,
      so a method that emits τ tokens per forward cannot run more than about τ times faster than plain decoding
      (the slack covers engine differences and noise) — what a busy machine's slow baseline rounds produce;
    * timed rounds that disagree: the totals of the rounds (``--repeats``) differ by more than 30%."""
    flags = []
    if not is_base and row["tau"] is not None and row["speedup"] is not None and \
            row["speedup"] > SPEEDUP_SLACK * row["tau"]:
        flags.append(f"speedup {row['speedup']:.2f}× exceeds what τ {row['tau']:.2f} allows "
                     f"(≤ {SPEEDUP_SLACK * row['tau']:.2f}×): timing noise, re-run on a quiet machine")
    rounds = [r["round_seconds"] for r in recs if r.get("round_seconds")]
    if rounds and len({len(x) for x in rounds}) == 1 and len(rounds[0]) > 1:
        totals = [sum(x[k] for x in rounds) for k in range(len(rounds[0]))]
        spread = max(totals) / min(totals) - 1 if min(totals) > 0 else 0.0
        if spread > ROUND_SPREAD:
            flags.append(f"its {len(totals)} timed rounds disagree by {100 * spread:.0f}% "
                         f"({min(totals):.2f}–{max(totals):.2f} s)")
    return flags


def latency_percentiles(recs: list[dict]) -> dict:
    """p50 / p95 over prompts of time to first token and time per output token (seconds; None when the records
    carry no latency, e.g. image runs)."""
    out = {}
    for name in ("ttft", "tpot"):
        values = [r[name] for r in recs if r.get(name) is not None]
        for q in (50, 95):
            out[f"{name}_p{q}"] = float(np.percentile(values, q)) if values else None
    return out


def specbench_speedup(records: list[dict], method: str, base: str) -> float | None:
    """The speedup Spec-Bench's ``evaluation/speed.py`` computes from the answer files: the mean over questions of
    the method's tokens/s (Σ new tokens / Σ wall time over a question's turns) over the mean of the baseline's,
    whose tokens are counted from its answer text (EOS left out). A mean of per-question rates, so it differs a
    little from ``speedup`` (a ratio of total times)."""
    def rates(m: str, key: str) -> list[float]:
        by_q: dict[str, list[float]] = {}
        for r in records:
            if r["method"] == m and r.get(key) is not None:
                q = by_q.setdefault(question_id(r), [0.0, 0.0])
                q[0] += r[key]
                q[1] += r["seconds"]
        return [tok / sec for tok, sec in by_q.values() if sec > 0]

    mine, theirs = rates(method, "new_tokens"), rates(base, "text_tokens")
    if not mine or not theirs or not np.mean(theirs) > 0:
        return None
    return float(np.mean(mine) / np.mean(theirs))


def question_id(record: dict) -> str:
    """The question a record answers: chat items are turns ``<question>-<turn>``, other items questions."""
    item = str(record.get("id", record["item"]))
    return item.rsplit("-", 1)[0] if record.get("suite") == "chat" else item


def slot_acceptance(hist: Counter | dict) -> list[float]:
    """Per draft slot j = 1, 2, ...: the share of verification steps whose draft was accepted through slot j (a
    step that emits n tokens accepted n - 1 drafts, the bonus token aside). For a block drafter this is its
    acceptance per slot in real decoding, not teacher-forced."""
    steps = sum(hist.values())
    longest = max(hist, default=1)
    return [sum(v for n, v in hist.items() if n >= j + 1) / steps for j in range(1, longest)] if steps else []


def by_category(records: list[dict], base: str) -> dict[str, list[dict]]:
    cats = list(dict.fromkeys(r["category"] for r in records))
    return {c: summarise([r for r in records if r["category"] == c], base) for c in cats}


def by_shard(records: list[dict], base: str) -> dict[int, list[dict]]:
    ranks = sorted({r.get("rank", 0) for r in records})
    return {k: summarise([r for r in records if r.get("rank", 0) == k], base) for k in ranks}


def merge_shards(shards: list[list[dict]]) -> list[dict]:
    """Concatenate the processes' records in item order (each item was run by exactly one process)."""
    records = [r for shard in shards for r in shard]
    seen = Counter((r["item"], r["method"]) for r in records)
    dup = [k for k, n in seen.items() if n > 1]
    if dup:
        raise ValueError(f"records of item {dup[0][0]} / method {dup[0][1]} came from more than one process")
    return sorted(records, key=lambda r: r["item"])  # stable: method order within an item is kept


def summarise_suite(records: list[dict], base: str) -> dict:
    """Everything a report shows about one suite."""
    return {"summary": summarise(records, base), "categories": by_category(records, base),
            "cost_model": cost_model(records, base),
            "shards": {str(k): v for k, v in by_shard(records, base).items()}}


__all__ = ["measurement_flags", "latency_percentiles", "specbench_speedup", "question_id", "slot_acceptance", "summarise", "by_category", "by_shard", "merge_shards", "summarise_suite"]
