"""The routes behind :func:`mmspec.pipeline`: one module per kind of target, plus what they share."""
