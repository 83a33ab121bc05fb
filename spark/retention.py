"""What the raw topics' retention deleted before the mapping job read it.

A restarted query resumes each raw partition where its checkpoint says. When retention
(or ``DeleteRecords``) has moved the partition's first offset past that point, Spark's
Kafka source fails the query with "Some data may have been lost" at every start
(``failOnDataLoss``, true by default): loud, but the job never gets going again, and our
command could not pass the option Spark's message names (every ``kafka_config`` key goes
to the Kafka client as ``kafka.<key>``).

So ``dlsroute spark-map`` compares its checkpoint with the first offsets left before Spark
starts (:func:`checkpoint_gaps`): a gap stops the command with an error naming each
``topic[partition]``, the offsets and how many records at most were lost, and
``--accept-data-loss`` is how to go on from the first offsets left (the gaps are still
logged as errors, and the query runs with ``failOnDataLoss`` false, so a gap that opens
while it runs is Spark's warning instead of a failure).

The checkpoint's layout is Spark's: ``offsets/<batch>`` holds the end offsets of each
planned micro-batch (a version line, the batch's metadata, then one JSON object per
source, ``{topic: {partition: offset}}``), ``commits/<batch>`` marks the batches done. A
restart plans the batch after the last one committed, from that one's end offsets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaException, TopicPartition

from connectors.kafka import admin
from connectors.retention import RetentionGap, first_offsets

__all__ = ["checkpoint_gaps", "checkpoint_starts"]

log = logging.getLogger(__name__)


def _batches(folder: Path) -> list[int]:
    """The micro-batch numbers that have a file in ``folder`` (none: no folder)."""
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def checkpoint_starts(checkpoint: str | Path) -> dict[tuple[str, int], int]:
    """Where a query restarted from ``checkpoint`` resumes each raw partition.

    Empty when no micro-batch was committed (the query starts at ``startingOffsets``).
    A source line that is not a JSON object (another source's format) is skipped.
    """
    root = Path(checkpoint)
    done = _batches(root / "commits")
    if not done or not (root / "offsets" / str(done[-1])).is_file():
        return {}
    lines = (root / "offsets" / str(done[-1])).read_text().splitlines()[2:]
    starts: dict[tuple[str, int], int] = {}
    for line in lines:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        if not isinstance(source, dict):
            continue
        for topic, parts in source.items():
            if isinstance(parts, dict):
                starts.update({(str(topic), int(p)): int(off) for p, off in parts.items()})
    return starts


def checkpoint_gaps(checkpoint: str | Path, bootstrap: str,
                    kafka: Mapping[str, str] | None = None) -> list[RetentionGap]:
    """The raw partitions whose resume point in ``checkpoint`` retention has deleted.

    Each one found is logged as an error. When the first offsets cannot be read (a
    timeout, a missing permission) a warning says so and no gap is reported: Spark's own
    check (``failOnDataLoss``) still stands.
    """
    starts = checkpoint_starts(checkpoint)
    if not starts:
        return []
    try:
        firsts = first_offsets(admin(bootstrap, **dict(kafka or {})),
                               [TopicPartition(t, p) for t, p in starts])
    except KafkaException as exc:
        log.warning("spark-map: could not compare the checkpoint with the first offsets "
                    "left (%s): a gap left by retention would go unnoticed here", exc)
        return []
    gaps = [RetentionGap(t, p, start, firsts[(t, p)])
            for (t, p), start in sorted(starts.items()) if start < firsts.get((t, p), -1)]
    for gap in gaps:
        log.error(gap.describe("spark-map"))
    return gaps
