"""The DLS broker node: the pure state machine, the in-process overlay, the Kafka service."""
