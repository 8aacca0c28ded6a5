"""The leaves of tracediff: errors, settings, output files, the Dask client, small column helpers.

They import nothing of tracediff but each other.
"""
