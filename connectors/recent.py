"""A bounded memory of recent keys: which events (or subscriptions) were seen lately.

The node remembers the events it routed and the subscriptions it cancelled; the client SDK
remembers the deliveries it handed out. All three drop a repeat that an at-least-once
writer upstream may send, and all three use :class:`RecentKeys`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from connectors.exceptions import ConnectorSettingError

__all__ = ["ROUTED_KEY_BYTES", "RecentKeys", "RepeatNotice", "bounded_key", "routed_key",
           "routed_prefix"]

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
        if not self.new and not self.old:  # nothing remembered (the usual memory of
            return False                   # cancellations): no key to make
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


class RepeatNotice:
    """Repeats dropped, said as a warning at most once per ``every_s`` (with their count).

    A repeat is expected after a fault: a publisher's retry, the Spark job's replay after a
    restart. But an ``event_id`` used twice for two different events looks the same, and
    the second one is dropped: a loss. Each repeat is logged at debug; the first, and then
    the count of those since the last notice, reach the log as a warning that says why
    ids must be unique.
    """

    def __init__(self, who: str, log: logging.Logger, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``who`` names the reader in the log ("node A", "client alice")."""
        self.who, self.log, self.every_s, self.clock = who, log, every_s, clock
        self.unsaid = 0  # repeats since the last notice
        self._next = float("-inf")  # when the next notice may be given

    def add(self, where: str, event_id: str, origin: str) -> None:
        """One repeat of ``event_id`` of ``origin``, read at ``where`` (``topic[p]@offset``)."""
        self.unsaid += 1
        self.log.debug("%s: %s repeats event %r of %s: skipped", self.who, where,
                       _short(event_id), _short(origin))
        now = self.clock()
        if now < self._next:
            return
        event_id, origin = _short(event_id), _short(origin)  # ids come from headers
        self.log.warning(
            "%s: %d repeated event(s) skipped%s, the latest %r of %s at %s: a publisher's "
            "retry or a replay after a restart, or an event_id used for two events (the "
            "second is taken for a repeat and dropped: ids must be unique per publisher)",
            self.who, self.unsaid, "" if self._next == float("-inf") else
            f" in the last {self.every_s:g} s or more", event_id, origin, where)
        self.unsaid, self._next = 0, now + self.every_s

    def close(self) -> None:
        """At the reader's close: say the repeats not said yet (a warning, if any)."""
        if self.unsaid:
            self.log.warning("%s: %d more repeated event(s) skipped since the last notice "
                             "(ids must be unique per publisher)", self.who, self.unsaid)
            self.unsaid = 0


def _short(text: str, most: int = 80) -> str:
    """``text``, or its first ``most - 3`` characters and "..." (a log line stays a line)."""
    return text if len(text) <= most else text[:most - 3] + "..."
