"""The bottom layer: the exceptions, the ``result-cache`` config section, signing keys,
one-time notices and per-process singletons. Imports nothing else of ``client_lib``."""
