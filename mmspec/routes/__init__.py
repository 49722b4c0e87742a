"""The routes behind :func:`mmspec.pipeline`: one module per kind of target, plus the zoo targets' defaults
(methods and drafters are built in :mod:`mmspec.registry`)."""
