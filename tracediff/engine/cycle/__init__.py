"""Cycles: each run cut into the repetitions of its loop (by a marker, host ranges or the repeating
op sequence), both sides checked to be the same loop, and every op aligned to a slot of a cycle
template. The rest of the engine reads its cycles from here.
"""
