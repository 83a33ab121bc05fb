"""The peers that ``benchmarks.node`` measures the node against, as their users write them.

Each runs in its own environment (``benchmarks.node`` creates it), not in the project's
venv, and imports nothing of the project.
"""
