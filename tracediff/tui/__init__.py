"""The terminal UI: browse a `Comparison` (verdict, attribution, timeline, replay, drill-down).

Stage: presentation. Input: an in-memory `Comparison`; output: a Textual app. The only package
that imports textual; `tui.model` holds the headless, vectorised computations the widgets draw.
"""
