"""Fault harness: a three-node line on a Kafka broker of its own, under faults, checked.

``python -m benchmarks.chaos`` (``make chaos``) runs scenarios (see
:mod:`benchmarks.chaos.scenarios`). Each starts nodes A-B-C (``dlsroute node``), clients
(:mod:`benchmarks.chaos.client`) and publishers (:mod:`benchmarks.chaos.publisher`) in
processes of their own that write their history to JSONL files, injects its faults at
moments drawn from the run's seed, and then lets :mod:`benchmarks.chaos.check` decide, from
those files alone, which (event, client) pairs had to be delivered and which were missing,
repeated or unexpected. docs/testing.md ("Fault harness") states the invariant.
"""
