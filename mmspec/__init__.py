"""mmspec: lossless speculative decoding on stock Hugging Face models."""

from .cache import SpecKVCache
from .frontend import ImageOutput, TextOutput
from .generator import GenerationOutput, GenerationStats, SpeculativeGenerator
from .pipeline import pipeline
from .tree import DEFAULT_TREE, DraftTree, TreeTemplate
from .vlm_generator import VLMGenerator

__version__ = "0.1.0"

__all__ = ["pipeline", "SpeculativeGenerator", "GenerationOutput", "GenerationStats", "SpecKVCache", "DraftTree",
           "TreeTemplate", "DEFAULT_TREE", "VLMGenerator", "TextOutput", "ImageOutput", "__version__"]
