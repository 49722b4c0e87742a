"""The cost model printed beside every measured speedup (DESIGN.md, "Cost structure").

A method's time on a prompt is decomposed into what the generator's timers measure (one record per prompt,
batch 1):

* ``prefill_t``: the target's prefill forward (``prefill_time``);
* ``prefill_d``: the drafter's prefill (``drafter_prefill_time``: its ``begin`` plus the first step's propose
  and observe, where drafters feed the prompt to themselves, eagerly or lazily);
* per verification step, in units of one plain target step ``c_t(1)`` — the verify forward of the own-engine
  plain baseline (``mmspec-plain``: the same loop, no drafter) — the target forward over the tree ``c_v``, the
  drafting ``c_d`` (the rest of the drafter's time, spread over all steps) and the loop's bookkeeping ``c_o``
  (commit, retire, stats, the call's setup and finish: the generator's ``total_time`` outside the draft and
  verify timers);
* a residual: the measured seconds the generator's ``total_time`` does not cover (the runner around it).

The model predicts a method's time over ``steps`` verification steps from what is the method's own — its
drafter's prefill, its per-step verify and drafting costs, its τ_step (steps = emitted tokens / τ_step) — and
what the engine pays whatever the method, measured on the own-engine plain baseline: the target's prefill of
the same prompts and the loop's fixed bookkeeping per step c_o(plain):

    T  =  prefill_t(plain) + prefill_d + steps · c_t(1) · (c_v + c_d + c_o(plain))

and its speedup against HF's plain ``generate`` as HF plain's measured seconds / T (against the own-engine
plain baseline: its measured seconds / T; their ratio is the own engine's speed against HF's).
``prediction_error`` = predicted / measured speedup − 1 is what the model leaves out: a method's prefill that
costs more than plain's (a feature drafter asks the target for its hidden states), bookkeeping that grows with
the tree (acceptance walk, commits of longer paths) and the time outside the generator. The "where the time
goes" shares are the method's own measured decomposition (c_o and prefill_t as measured for it). With T's
decode part, τ_step / (c_v + c_d + c_o) is the decode-phase speedup over a plain step.

Rounds: ``seconds`` is a prompt's median over the timed rounds, the stats (and so every part) come from the
first round (``round_seconds[0]``). Each record's parts are scaled by ``seconds / round_seconds[0]`` so that the
decomposition adds up to ``seconds`` (a slow or fast first round shifts all its parts alike); records without
``round_seconds`` are taken as one round. Records written before ``drafter_prefill_time`` / ``total_time``
existed still give a row: an unknown drafter prefill stays in ``c_d`` and an unknown bookkeeping in the
residual (``prefill_drafter_s`` / ``overhead_cost`` are then None).
"""

from __future__ import annotations

OWN_PLAIN = "mmspec-plain"
SHARES = ("prefill_target", "prefill_drafter", "verify", "draft", "bookkeeping", "other")


def _round_scale(r: dict) -> float:
    """``seconds`` over the time of the round the stats come from (the first): 1 without ``round_seconds``."""
    rounds = r.get("round_seconds")
    if rounds and rounds[0] and rounds[0] > 0 and r.get("seconds") is not None:
        return r["seconds"] / rounds[0]
    return 1.0


def _timed(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r.get("target_forwards") and r.get("prefill_time") is not None
            and r.get("verify_time") is not None and r.get("seconds") is not None]


def _decode_parts(recs: list[dict], items: set | None = None) -> dict | None:
    """The seconds of ``recs`` (those of ``items``, if given) split into the model's parts, summed."""
    timed = [r for r in _timed(recs) if items is None or r["item"] in items]
    if not timed:
        return None
    steps = sum(r["target_forwards"] - 1 for r in timed)  # the prefill's forward is no verification step
    if steps <= 0:
        return None
    p = {"steps": steps, "seconds": 0.0, "prefill_t": 0.0, "prefill_d": 0.0, "verify": 0.0, "draft": 0.0,
         "bookkeeping": 0.0, "residual": 0.0, "prompts": len(timed),
         "emitted": sum(r["new_tokens"] - 1 for r in timed),  # the prefill emits each prompt's first token
         "items": {r["item"] for r in timed},
         "drafter_prefill_known": any(r.get("drafter_prefill_time") is not None for r in timed),
         "total_known": any(r.get("total_time") is not None for r in timed)}
    for r in timed:
        k = _round_scale(r)
        prefill, verify, draft = k * r["prefill_time"], k * r["verify_time"], k * (r.get("draft_time") or 0.0)
        dp = k * (r.get("drafter_prefill_time") or 0.0)  # unknown: stays in the per-step drafting
        total = verify + draft if r.get("total_time") is None else k * r["total_time"]  # unknown: in the residual
        p["seconds"] += r["seconds"]
        p["prefill_t"] += prefill
        p["prefill_d"] += dp
        p["verify"] += verify - prefill
        p["draft"] += draft - dp
        p["bookkeeping"] += total - verify - draft
        p["residual"] += r["seconds"] - total
    p["modelled"] = p["prefill_t"] + p["prefill_d"] + p["verify"] + p["draft"] + p["bookkeeping"]
    return p


def cost_model(records: list[dict], base: str = "plain", own_plain: str = OWN_PLAIN) -> list[dict]:
    """One row per timed method (the own-engine baseline included): the per-step costs c_v, c_d, c_o (in
    target-step units), τ_step, the prefills, the residual, predicted and measured speedups and where the time
    goes. Empty when the own-engine plain baseline did not run (there is no c_t(1) to divide by)."""
    by_method: dict[str, list[dict]] = {}
    for r in records:
        by_method.setdefault(r["method"], []).append(r)
    own = _decode_parts(by_method.get(own_plain, []))
    if own is None:
        return []
    c_t1 = own["verify"] / own["steps"]
    if not c_t1 > 0:
        return []
    c_o_plain = own["bookkeeping"] / own["steps"] / c_t1
    base_secs = {r["item"]: r["seconds"] for r in by_method.get(base, []) if r.get("seconds") is not None}
    own_secs = {r["item"]: r["seconds"] for r in _timed(by_method[own_plain])}
    rows = []
    for method, recs in by_method.items():
        timed_items = {r["item"] for r in _timed(recs)}
        common = {i for i in timed_items if i in base_secs and i in own_secs}
        # the decomposition covers the prompts the speedups are measured on (all timed ones when none is)
        parts = _decode_parts(recs, common or None)
        if parts is None:
            continue
        steps, secs, T = parts["steps"], parts["seconds"], parts["modelled"]
        engine = sum(base_secs[i] for i in common) / sum(own_secs[i] for i in common) if common else None
        on_own = parts["items"] <= set(own_secs)
        own_t = sum(own_secs[i] for i in parts["items"]) if on_own else None
        hf_t = sum(base_secs[i] for i in common) if common else None
        c_v = parts["verify"] / steps / c_t1
        c_d = parts["draft"] / steps / c_t1
        c_o = parts["bookkeeping"] / steps / c_t1
        # the prediction: the engine's part (target prefill of these prompts, bookkeeping per step) from the plain
        # baseline, the method's own part (drafter prefill, c_v, c_d, steps) from it
        own_here = _decode_parts(by_method[own_plain], parts["items"]) if on_own else None
        if own_here is not None and parts["total_known"] and own["total_known"]:
            T = own_here["prefill_t"] + parts["prefill_d"] + steps * c_t1 * (c_v + c_d + c_o_plain)
        predicted = hf_t / T if hf_t is not None and T > 0 else None
        measured = hf_t / secs if hf_t is not None and secs > 0 else None
        shares = dict(zip(SHARES, (parts["prefill_t"], parts["prefill_d"], parts["verify"], parts["draft"],
                                   parts["bookkeeping"], parts["residual"])))
        rows.append({
            "method": method, "steps": steps, "prompts": parts["prompts"],
            "tau_step": parts["emitted"] / steps, "verify_cost": c_v, "draft_cost": c_d,
            "overhead_cost": c_o if parts["total_known"] else None,
            "target_step_ms": 1000 * c_t1,
            "prefill_target_s": parts["prefill_t"],
            "prefill_drafter_s": parts["prefill_d"] if parts["drafter_prefill_known"] else None,
            "residual_s": parts["residual"], "predicted_s": T, "measured_s": secs,
            "predicted_vs_own_plain": own_t / T if own_t is not None and T > 0 else None,
            "predicted_speedup": predicted,
            "measured_speedup": measured,
            "prediction_error": predicted / measured - 1 if predicted and measured else None,
            "own_plain_vs_hf": engine,
            "time_shares": {k: v / secs for k, v in shares.items()} if secs > 0 else None,
        })
    return rows


def _x(v, fmt: str = ".2f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def cost_table(rows: list[dict], base: str = "plain") -> list[str]:
    """Markdown lines; empty without the own-engine baseline. ``base``: the method speedups are measured
    against (``plain``: HF's plain ``generate``)."""
    if not rows:
        return []
    c_t1 = rows[0]["target_step_ms"]
    engine = next((r["own_plain_vs_hf"] for r in rows if r["method"] == OWN_PLAIN), None)
    eng = f"{engine:.2f}×" if engine else "n/a"
    label = "HF plain `generate`" if base == "plain" else f"the base method `{base}`"
    lines = [f"Cost model: a method's predicted time = the target's prefill (measured on mmspec-plain) + its "
             f"drafter's prefill (begin and first step's drafting) + steps × c_t(1) × (c_v + c_d + c_o(plain)), "
             f"where per verification step c_v is the target forward over the tree, c_d the drafting and c_o the "
             f"loop's bookkeeping (the engine's fixed cost, taken from mmspec-plain in the prediction; the column "
             f"shows the method's own), in units of one plain target step c_t(1) = {c_t1:.2f} ms on the own engine "
             f"(whose speed is {eng} {label}'s); predicted speedup = {label}'s seconds / that time, error = "
             f"predicted / measured − 1 (what the model leaves out: a costlier prefill, bookkeeping that grows with "
             f"the tree, time outside the generator).",
             "",
             "| method | τ per step | verify cost c_v | draft cost c_d | predicted speedup | measured speedup | "
             "error | bookkeeping c_o | prefill target / drafter (ms per prompt) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = r.get("prediction_error")
        n = max(r.get("prompts") or 1, 1)
        pt, pd = r.get("prefill_target_s"), r.get("prefill_drafter_s")
        pt, pd = (_x(None if v is None else 1000 * v / n, ".1f") for v in (pt, pd))
        prefill = f"{pt} / {pd}"
        lines.append(f"| {r['method']} | {r['tau_step']:.2f} | {r['verify_cost']:.2f} | {r['draft_cost']:.2f} | "
                     f"{_x(r['predicted_speedup'], '.2f', '×')} | {_x(r['measured_speedup'], '.2f', '×')} | "
                     f"{_x(None if err is None else 100 * err, '+.1f', '%')} | {_x(r.get('overhead_cost'))} | "
                     f"{prefill} |")
    shared = [r for r in rows if r.get("time_shares")]
    if shared:
        lines += ["", "Where the time goes (share of each method's measured seconds; other: outside the generator):",
                  "", "| method | prefill target | prefill drafter | verify | draft | bookkeeping | other |",
                  "|---|---|---|---|---|---|---|"]
        for r in shared:
            s = r["time_shares"]
            cells = [_x(100 * s[k], ".0f", "%") for k in SHARES]
            if r.get("prefill_drafter_s") is None:
                cells[1] = "n/a"  # unknown (older records): inside draft
            lines.append(f"| {r['method']} | " + " | ".join(cells) + " |")
    return lines


__all__ = ["cost_model", "cost_table", "OWN_PLAIN", "SHARES"]
