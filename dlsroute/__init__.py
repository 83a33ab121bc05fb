"""dlsroute: content-based publish/subscribe on Apache Kafka with the DLS model."""

__version__ = "0.1.0"
