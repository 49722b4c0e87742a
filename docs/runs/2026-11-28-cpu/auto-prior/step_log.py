"""The trace scripts' shared hook: every AdaptiveDrafter step appended to a list as (kind, tokens, seconds); kind D
drafted, p plain, s plain with an unverified draft."""
import time

from mmspec.drafters.adaptive import AdaptiveDrafter


def log_steps() -> list:
    """Patch AdaptiveDrafter.observe (every instance) to log its steps; returns the list it appends to."""
    log, observe = [], AdaptiveDrafter.observe

    def logged(self, context, run, tree, result, hidden=None):
        kind = "D" if (run.drafting or run.opening) else \
            ("s" if run.shadow is not None and run.since_shadow == 0 else "p")
        seconds = time.perf_counter() - run.t_proposed + run.t_draft
        observe(self, context, run, tree, result, hidden)
        log.append((kind, int(result.num_accepted[0]) + 1, seconds))

    AdaptiveDrafter.observe = logged
    return log
