"""mmspec's tests, in folders that mirror the package (core, targets, drafters, verifiers, kernels, frontends,
eval, training, zoo); shared fixtures in ``conftest.py``, shared model builders in helper modules here."""
