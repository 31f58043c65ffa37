"""Examples that ship with the package, so that ``dask-cache demo`` runs from a wheel.

``examples/branches.py`` in a source checkout is a link to :mod:`.branches`.
"""

__all__: list[str] = []
