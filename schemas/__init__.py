"""The wire contract's Avro schemas (``avro/*.avsc``), shipped in the wheel as package data.

:mod:`connectors.serde` loads them; this package holds no code.
"""
