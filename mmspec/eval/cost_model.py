"""The cost model printed beside every measured speedup (DESIGN.md, "Cost structure").

Per verification step a speculative method pays one target forward over its tree (``c_v``) and its drafting
(``c_d``: every drafter forward of the step, plus begin/observe bookkeeping), and emits ``τ_step`` tokens. In
units of one plain target step ``c_t(1)`` — measured on the own-engine plain baseline (``mmspec-plain``: the
same loop, no drafter) — the decode phase predicts

    speedup vs own-engine plain  ≈  τ_step / (c_v + c_d)

and multiplying by (HF plain seconds / own-engine plain seconds) predicts the speedup against HF's plain
``generate``, which is what the measured column reports. Prefill is left out of both costs (it is the same
for every method), so prediction and measurement differ by the prefill's share and by timing noise.
"""

from __future__ import annotations

OWN_PLAIN = "mmspec-plain"


def _decode_parts(recs: list[dict]) -> dict | None:
    timed = [r for r in recs if r.get("target_forwards") and r.get("prefill_time") is not None]
    if not timed:
        return None
    steps = sum(r["target_forwards"] - 1 for r in timed)
    if steps <= 0:
        return None
    return {"steps": steps,
            "verify": sum(r["verify_time"] - r["prefill_time"] for r in timed),
            "draft": sum(r["draft_time"] or 0.0 for r in timed),
            "emitted": sum(r["new_tokens"] - 1 for r in timed),  # the prefill emits each prompt's first token
            "items": {r["item"] for r in timed}}


def cost_model(records: list[dict], base: str = "plain", own_plain: str = OWN_PLAIN) -> list[dict]:
    """One row per timed speculative method: c_v, c_d (per step, in target-step units), τ_step, predicted and
    measured speedups. Empty when the own-engine plain baseline did not run (there is no c_t(1) to divide by)."""
    by_method: dict[str, list[dict]] = {}
    for r in records:
        by_method.setdefault(r["method"], []).append(r)
    own = _decode_parts(by_method.get(own_plain, []))
    if own is None:
        return []
    c_t1 = own["verify"] / own["steps"]
    base_secs = {r["item"]: r["seconds"] for r in by_method.get(base, [])}
    own_secs = {r["item"]: r["seconds"] for r in by_method[own_plain]}
    rows = []
    for method, recs in by_method.items():
        parts = _decode_parts(recs)
        if parts is None:
            continue
        items = [i for i in parts["items"] if i in base_secs and i in own_secs]
        engine = sum(base_secs[i] for i in items) / sum(own_secs[i] for i in items) if items else None
        secs = sum(r["seconds"] for r in recs if r["item"] in items)
        c_v = parts["verify"] / parts["steps"] / c_t1
        c_d = parts["draft"] / parts["steps"] / c_t1
        tau_step = parts["emitted"] / parts["steps"]
        predicted_own = tau_step / (c_v + c_d)
        rows.append({
            "method": method, "steps": parts["steps"], "tau_step": tau_step, "verify_cost": c_v, "draft_cost": c_d,
            "target_step_ms": 1000 * c_t1,
            "predicted_vs_own_plain": predicted_own,
            "predicted_speedup": predicted_own * engine if engine else None,
            "measured_speedup": sum(base_secs[i] for i in items) / secs if items and secs > 0 else None,
            "own_plain_vs_hf": engine,
        })
    return rows


def cost_table(rows: list[dict], base: str = "plain") -> list[str]:
    """Markdown lines; empty without the own-engine baseline. ``base``: the method speedups are measured
    against (``plain``: HF's plain ``generate``)."""
    if not rows:
        return []
    c_t1 = rows[0]["target_step_ms"]
    engine = next((r["own_plain_vs_hf"] for r in rows if r["method"] == OWN_PLAIN), None)
    eng = f"{engine:.2f}×" if engine else "n/a"
    label = "HF plain `generate`" if base == "plain" else f"the base method `{base}`"
    lines = [f"Cost model (decode phase; one plain target step c_t(1) = {c_t1:.2f} ms on the own engine, whose "
             f"speed is {eng} {label}'s): per verification step the target forward over the tree costs "
             "c_v and the drafting c_d, both in units of c_t(1); predicted speedup = τ_step / (c_v + c_d) × "
             f"(own engine vs {label}).", "",
             "| method | τ per step | verify cost c_v | draft cost c_d | predicted speedup | measured speedup |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        pred = "n/a" if r["predicted_speedup"] is None else f"{r['predicted_speedup']:.2f}×"
        meas = "n/a" if r["measured_speedup"] is None else f"{r['measured_speedup']:.2f}×"
        lines.append(f"| {r['method']} | {r['tau_step']:.2f} | {r['verify_cost']:.2f} | {r['draft_cost']:.2f} | "
                     f"{pred} | {meas} |")
    return lines


__all__ = ["cost_model", "cost_table", "OWN_PLAIN"]
