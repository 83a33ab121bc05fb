"""Avro serde of the wire contract: single-object encoding of the schemas in ``schemas/avro``.

Split by concern; every public name is re-exported here, so ``from connectors.serde import
X`` is the way to use them:

* :mod:`~connectors.serde.framing`: the ten-byte single-object header (``MARKER``,
  ``HEADER_SIZE``);
* :mod:`~connectors.serde.avro`: the generic serde :class:`Serde` and :data:`SERDE`, the
  serde of the project's own schemas;
* :mod:`~connectors.serde.raw_event`: the hand-written codec of RawEvent, the message every
  event travels as;
* :mod:`~connectors.serde.messages`: an encoder and a decoder for each message (decoders
  return plain dicts);
* :mod:`~connectors.serde.raw`: the raw topics' records, Avro or JSON (:func:`decode_raw`),
  and their field table (:data:`RAW_FIELDS`, :data:`RAW_OPS`, :data:`RAW_SCHEMAS`), which
  the Spark mapping job reads too.
"""

from __future__ import annotations

# Every public name of the modules, as each module's __all__ lists it.
from connectors.serde import avro, framing, messages, raw
from connectors.serde.avro import *  # noqa: F403
from connectors.serde.framing import *  # noqa: F403
from connectors.serde.messages import *  # noqa: F403
from connectors.serde.raw import *  # noqa: F403

__all__ = [*framing.__all__, *avro.__all__, *messages.__all__, *raw.__all__]
