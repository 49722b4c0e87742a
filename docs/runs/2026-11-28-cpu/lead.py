"""Each VLM suite run's lead: the best dflash row's speedup over the best eagle-* / msd-* / flash-* row of the run.

    python lead.py DIR [DIR ...]"""
import json, sys
for path in sys.argv[1:]:
    rows = {x["method"]: x for x in json.load(open(f"{path}/results.json"))["suites"]["vlm"]["summary"]}
    fast = max((r["speedup"], m) for m, r in rows.items() if m.startswith("dflash"))
    best = max((r["speedup"], m) for m, r in rows.items() if m.startswith(("eagle", "msd", "flash")))
    exact = all(r["exact"] == 1.0 for m, r in rows.items() if m not in ("plain",) and r["exact"] is not None)
    print(f"{path}: plain {rows['plain']['tokens_per_s']:.1f} tok/s; {fast[1]} {fast[0]:.3f}x (tau "
          f"{rows[fast[1]]['tau']:.2f}); {best[1]} {best[0]:.3f}x; lead {fast[0] / best[0]:.3f}x; all exact {exact}")
