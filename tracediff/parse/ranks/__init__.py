"""A run of several rank files made one: their rank names, GPUs and clocks, and the join.

ranknames.py names each file's rank, gpus.py maps devices, clocks.py aligns the ranks' clocks on
their collectives, and combine.py makes one run of them.
"""
