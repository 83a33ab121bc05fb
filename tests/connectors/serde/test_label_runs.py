"""A run of LabelSubscription messages read at once is what decoding each one gives.

Whatever the messages (valid, truncated, extended, with a byte changed, of another
schema), a run that comes back holds exactly the fields :meth:`Serde.decode` reads from
each; and a run of valid messages with rows of the space's size does come back.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.serde import SERDE, encode_label_subscription, encode_label_unsubscription
from connectors.serde.label_runs import read_run
from dls import _jit
from dls.exceptions import DLSError

pytestmark = pytest.mark.skipif(not _jit.ENABLED, reason=f"kernels off: {_jit.REASON}")

HEADER = SERDE.header("LabelSubscription")
ROW = 24

texts = st.text(min_size=0, max_size=12)
subscription = st.builds(
    lambda c, i, labels, where, row: encode_label_subscription(
        c, i, np.array(labels, dtype=np.uint64), where, row),
    texts, texts, st.lists(st.integers(0, 2**64 - 1), max_size=6),
    st.none() | texts, st.none() | st.binary(min_size=ROW, max_size=ROW)
    | st.binary(max_size=40))


@st.composite
def spoiled(draw: st.DrawFn) -> bytes:
    """A message, maybe cut, extended, changed in one byte, or of another schema."""
    msg = draw(subscription)
    how = draw(st.sampled_from(["keep", "keep", "cut", "extend", "flip", "other"]))
    if how == "cut":
        return msg[:draw(st.integers(0, len(msg) - 1))]
    if how == "extend":
        return msg + draw(st.binary(min_size=1, max_size=4))
    if how == "flip":
        at = draw(st.integers(0, len(msg) - 1))
        return msg[:at] + bytes([draw(st.integers(0, 255))]) + msg[at + 1:]
    if how == "other":
        return encode_label_unsubscription("ann", "s1")
    return msg


def _decoded(value: bytes) -> dict | None:
    try:
        name, rec = SERDE.decode(value)
    except DLSError:
        return None
    return rec if name == "LabelSubscription" else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spoiled(), min_size=1, max_size=8))
def test_a_run_read_at_once_is_each_message_decoded(values: list[bytes]) -> None:
    run = read_run(values, HEADER, ROW)
    recs = [_decoded(v) for v in values]
    usable = all(r is not None and r["row"] is not None and len(r["row"]) == ROW
                 and SERDE._identify(v).header == HEADER for r, v in zip(recs, values, strict=True))
    if not usable:
        assert run is None
        return
    assert run is not None
    assert run.clients == [r["client"] for r in recs]  # type: ignore[index]
    assert run.ids == [r["id"] for r in recs]  # type: ignore[index]
    for i, r in enumerate(recs):
        assert r is not None
        want = np.frombuffer(r["labels"], dtype=">u8").astype(np.uint64)
        assert run.labels[run.offsets[i]:run.offsets[i + 1]].tolist() == want.tolist()
        assert run.rows[i].tobytes() == r["row"]


def test_labels_not_in_whole_words_or_no_row_give_no_run() -> None:
    good = encode_label_subscription("ann", "s1", np.array([1, 2], dtype=np.uint64), None,
                                     bytes(ROW))
    no_row = encode_label_subscription("ann", "s2", np.array([1], dtype=np.uint64), "x > 1")
    odd = SERDE.encode("LabelSubscription", {"client": "ann", "id": "s3", "labels": b"\x00" * 9,
                                             "where": None, "row": bytes(ROW)})
    assert read_run([good, good], HEADER, ROW) is not None
    assert read_run([good, no_row], HEADER, ROW) is None
    assert read_run([good, odd], HEADER, ROW) is None
    assert read_run([good, None], HEADER, ROW) is None
