"""`tracediff bisect`: which first-parent commit between GOOD and BAD made the workload slower.

It captures through `capture/` and compares through the engine, so it lives above both.
`bisection.py` holds the state and rules, `search.py` drives them.
"""
