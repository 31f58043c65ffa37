"""Pure store decisions (no I/O): which results to store (:mod:`.modes`), the run's side of
the ``auto`` policy (:mod:`.budget`), what tasks cost and loads take here
(:mod:`.costs`, :mod:`.speeds`), entry lifetimes (:mod:`.expiry`)."""
