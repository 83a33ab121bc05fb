"""A bounded memory of recent keys: which events (or subscriptions) were seen lately.

The node remembers the events it routed and the subscriptions it cancelled; the client SDK
remembers the deliveries it handed out. All three drop a repeat that an at-least-once
writer upstream may send, and all three use :class:`RecentKeys`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from connectors.exceptions import ConnectorSettingError

__all__ = ["ROUTED_KEY_BYTES", "RecentKeys", "bounded_key", "routed_key", "routed_prefix"]

#: A routed key longer than this is kept as a digest (:func:`bounded_key`): origins and
#: event ids come from headers, and a memory of 100,000 keys of a 500 KB id each would hold
#: 50 GB. Keys of names and ids a client makes (node and client names of at most 249
#: characters) stay as they are.
ROUTED_KEY_BYTES = 512


def bounded_key(key: bytes) -> bytes:
    """``key`` itself, or past :data:`ROUTED_KEY_BYTES` a 0xFF byte and its 20-byte BLAKE2b.

    0xFF opens no UTF-8 text, so a digest equals no key of a UTF-8 origin.
    """
    if len(key) <= ROUTED_KEY_BYTES:
        return key
    return b"\xff" + hashlib.blake2b(key, digest_size=20).digest()


def routed_prefix(origin: str | bytes) -> bytes:
    """What every routed key of ``origin`` starts with (unbounded): the origin and a NUL."""
    return (origin.encode() if isinstance(origin, str) else origin) + b"\x00"


def routed_key(origin: str | bytes, event_id: str | bytes) -> bytes:
    """The key of an event in a routed-id memory: origin, a NUL, the event id (bounded).

    One bytes object rather than a tuple: a dict holding only bytes (and None) is never
    tracked by the garbage collector, so a large memory costs collections nothing.
    """
    e = event_id.encode() if isinstance(event_id, str) else event_id
    return bounded_key(routed_prefix(origin) + e)


class RecentKeys:
    """Remembers at least the last ``size`` keys added, and at most twice that many.

    Two generations of plain dicts: keys go into ``new``; once it holds ``size`` keys it
    becomes ``old`` and the previous ``old`` is dropped whole. The work is a dict update per
    batch and one dict freed per ``size`` keys, never an eviction per key; a membership
    test is two dict lookups.
    """

    def __init__(self, size: int) -> None:
        """Raises :class:`ConnectorSettingError` for a size below 1."""
        if not isinstance(size, int) or size < 1:
            raise ConnectorSettingError(f"size must be at least 1, got {size!r}",
                                        field="size", value=size)
        self.size = size
        self.old: dict[Any, None] = {}
        self.new: dict[Any, None] = {}

    @staticmethod
    def _key(key: Any) -> Any:
        """A pair of strings or bytes (origin and id, client and id) as its routed_key."""
        if (type(key) is tuple and len(key) == 2
                and all(isinstance(k, str | bytes) for k in key)):
            return routed_key(*key)
        return key

    def __contains__(self, key: object) -> bool:
        """Membership; a pair ``(origin, event id)`` is looked up as its routed_key."""
        key = self._key(key)
        return key in self.new or key in self.old

    def __len__(self) -> int:
        return len(self.new) + len(self.old)

    def add(self, key: Any) -> None:
        """Add one key (a pair as its routed_key)."""
        self.new[self._key(key)] = None
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}

    def discard(self, key: Any) -> None:
        """Forget a key (a pair as its routed_key), if it is remembered."""
        key = self._key(key)
        self.new.pop(key, None)
        self.old.pop(key, None)

    def update(self, keys: dict[Any, None]) -> None:
        """Add ``keys`` (a dict used as an ordered set, its keys taken as they are)."""
        self.new.update(keys)
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}
