"""Drafters: anything that proposes a DraftTree from the decoding state."""

from ..state import DraftContext
from .adaptive import AdaptiveDrafter
from .autoregressive import AutoregressiveDrafter, AutoregressiveRun
from .base import Drafter
from .deer import DEERDrafter
from .feature import FeatureDrafter
from .feature_model import FeatureDrafterConfig, FeatureDraftModel
from .diffusion import DiffusionLM
from .no_draft import NoDrafter
from .prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "DraftContext", "AdaptiveDrafter", "AutoregressiveDrafter", "AutoregressiveRun", "PromptLookupDrafter",
           "DiffusionLM", "DEERDrafter", "FeatureDrafter", "FeatureDraftModel", "FeatureDrafterConfig", "NoDrafter"]
