"""The layout simulator by concern (srift/simulate/layouts.py re-exports it whole): plan, pipeline,
blocks, collectives, memory, step, search."""
