"""``python -m mmspec.eval`` (also under ``accelerate launch -m mmspec.eval``): the same as ``mmspec eval``."""

import sys

from .run import main

sys.exit(main())
