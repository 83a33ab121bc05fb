"""Avro single-object framing: the ten bytes that open every message of the wire contract.

A message is the marker ``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the
schema's Parsing Canonical Form, then the schemaless binary body. Any reader can tell the
schema from the first ten bytes, without a registry.
"""

from __future__ import annotations

__all__ = ["HEADER_SIZE", "MARKER"]

MARKER = b"\xc3\x01"
"""The two marker bytes that open an Avro single-object encoded message."""
HEADER_SIZE = 10
"""Marker plus fingerprint: the body starts at this offset."""
