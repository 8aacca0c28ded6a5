"""The per-file map/reduce: each rank file read, cut and reduced to small tables (reduce.py,
rankunit.py), in this process or on a Dask cluster (executor.py, cluster.py), and each side's
reduced files joined into one Comparison (join.py). eventslices.py rebuilds a GPU's events on
demand for the TUI.
"""
