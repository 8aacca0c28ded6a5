"""Export: run tables and comparison results to Parquet datasets and Perfetto/Chrome JSON traces.

Stage: output. `parquet.py` writes hive-partitioned Parquet datasets (run tables, diff tables);
`perfetto.py` writes a Comparison as a Chrome JSON trace that ui.perfetto.dev opens.
"""
