"""Tools that drive broker nodes from outside the node package.

- :mod:`dlsroute.tools.simulate`: ``dlsroute simulate``, a trace through an in-process
  overlay (no Kafka).
- :mod:`dlsroute.tools.replay`: ``dlsroute replay``, the same trace through real nodes on
  Kafka, with every op sent by the client SDK.
- :mod:`dlsroute.tools.local_network`: the node services of a topology, each on a thread
  of this process.
- :mod:`dlsroute.tools.attached_network`: nodes running elsewhere, watched through Kafka.
"""
