"""Was the machine busy while we timed? A speedup measured while other work competed for the cores is the
machine's, not the method's; every timing report (demo, bench, eval) carries this check and says so.

Two signs, either enough: the 1-minute load average above the core count at the start or the end of the
timing, or plain decoding's timed rounds disagreeing by more than ``SPREAD`` (the same work, timed twice)."""

from __future__ import annotations

import os

SPREAD = 1.5  # slowest / fastest plain-decoding round beyond which the timings are not trusted


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # platforms without getloadavg
        return None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_check(start: float | None, plain_rounds: list[float] | None = None, end: float | None = None,
               n_cores: int | None = None) -> dict:
    """``start``: :func:`load_average` taken before timing; ``end`` defaults to now; ``plain_rounds``: the
    seconds of each timed round of plain decoding over the same prompts."""
    end = load_average() if end is None else end
    n_cores = n_cores or cores()
    reasons = []
    high = [x for x in (start, end) if x is not None and x > n_cores]
    if high:
        reasons.append(f"load average {start if start is not None else float('nan'):.1f} at the start and "
                       f"{end if end is not None else float('nan'):.1f} at the end on {n_cores} cores")
    rounds = [r for r in (plain_rounds or []) if r > 0]
    if len(rounds) >= 2 and max(rounds) / min(rounds) > SPREAD:
        reasons.append(f"plain decoding's timed rounds took {min(rounds):.2f}s to {max(rounds):.2f}s "
                       f"({max(rounds) / min(rounds):.1f}× apart)")
    warning = None
    if reasons:
        warning = ("the machine was busy while timing (" + "; ".join(reasons) + "): speedups measured under load "
                   "are not the method's; re-run on a quiet machine")
    return {"cores": n_cores, "load_start": start, "load_end": end, "busy": bool(reasons), "warning": warning}


__all__ = ["load_average", "load_check", "cores", "SPREAD"]
