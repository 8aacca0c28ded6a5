"""Generators and shared set-ups of the tests (and bench/): no test module imports another."""
