"""Soak: the fault harness's network for ten minutes at half its maximum rate, checked.

``python -m benchmarks.soak`` (``make soak``, not in CI; :mod:`benchmarks.soak.run`)
measures the maximum rate of nodes A-B-C on its own Kafka broker, then publishes at half
of it with subscription churn, samples every process's resident memory every 10 s, and
reports the slope of memory over the last 8 minutes (:mod:`benchmarks.soak.memory` says
when it is flat) and the missing and repeated (event, client) pairs
(:mod:`benchmarks.soak.check`, the chaos checker vectorised). docs/testing.md ("Soak")
has the results.
"""
