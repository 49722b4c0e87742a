"""Drafters: anything that proposes a DraftTree from the decoding state."""

from .autoregressive import AutoregressiveDrafter
from .base import Drafter
from .prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "AutoregressiveDrafter", "PromptLookupDrafter"]
