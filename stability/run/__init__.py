"""What drives stages 1-5: the search over cases, its executors
(in-process, worker processes, Dask), the store and sweeps."""
