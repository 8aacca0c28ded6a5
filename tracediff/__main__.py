from tracediff.cli import run

run()
