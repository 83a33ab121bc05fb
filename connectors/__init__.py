"""Client SDK, Avro serde and the Kafka plumbing shared by the other parts."""
