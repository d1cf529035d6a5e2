"""Benchmark data: where it is found (:mod:`.store`), what is pinned (:mod:`.sources`), how it is fetched (:mod:`.pull`)."""
