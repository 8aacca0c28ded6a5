"""Statistics and decisions: the change attributed to contributors, tested per cycle and per run
(or capture round), split into GPU work and host idle, and the verdict and CI gate drawn from it.
"""
