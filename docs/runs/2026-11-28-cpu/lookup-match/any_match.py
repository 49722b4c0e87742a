"""The rule before ALONE_MATCH, for the side-by-side scripts here: a lone lookup step after a match of any length."""
from mmspec.drafters.dflash import DFlashDrafter


class AnyMatch(DFlashDrafter):
    def _lookup_alone(self, state, branches=None):
        conts, _ = self._branches(state, self.lookup) if branches is None else branches
        return super()._lookup_alone(state, (conts, [99] * len(conts)))
