"""The Run contract: the Arrow schemas of every table, the run file (format, footer, checksums)
and the run-set index. Imports only tracediff.base.
"""
