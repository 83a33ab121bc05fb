"""How a broker keeps its filters: :class:`BrokerConfig`, one frozen object per broker state.

:class:`broker_node.state.BrokerState` takes one (and re-exports it); the filter sizes come
from a space spec's ``filters`` object (:meth:`BrokerConfig.from_space`) or are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from broker_node.exceptions import BrokerError
from broker_node.resize import check_target, spec_size
from dls.space import ContentSpace

__all__ = ["BrokerConfig", "Mode"]

Mode = Literal["exact", "paper"]


@dataclass(frozen=True)
class BrokerConfig:
    """How a broker keeps its filters.

    ``client_filter``: ``cbf`` (bit-sliced counting Bloom filters, any label space) or
    ``direct`` (exact direct-address bitmap, small label spaces only). ``routing_filter``:
    ``cbf`` (ERTs are counting Bloom filters, as in the paper) or ``direct`` (route on the
    exact advertised-label tables; ``exact`` mode only).
    """

    mode: Mode = "exact"
    client_filter: Literal["cbf", "direct"] = "cbf"
    routing_filter: Literal["cbf", "direct"] = "cbf"
    client_m: int = 65_536
    client_k: int = 4
    routing_m: int = 1 << 20
    routing_k: int = 7
    counter_bits: int = 4
    seed: int = 0
    #: Threads the client bank may match a large event batch on (1: none). Deliveries
    #: are the same; only worth it with a core to spare.
    match_threads: int = 1
    #: Threads a large subscription batch's client-bank updates may run on (1: none);
    #: the state is the same.
    update_threads: int = 1
    #: Rebuild the client bank or an ERT larger once its estimated false-positive rate
    #: passes its target (None: ``2 ** -k``), from the exact tables (broker_node.resize).
    resize_filters: bool = True
    client_fp_target: float | None = None
    routing_fp_target: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("exact", "paper"):
            raise BrokerError(f"mode must be 'exact' or 'paper', got {self.mode!r}",
                              field="mode", value=self.mode)
        if self.client_filter not in ("cbf", "direct"):
            raise BrokerError(f"client_filter must be 'cbf' or 'direct', got "
                              f"{self.client_filter!r}", field="client_filter",
                              value=self.client_filter)
        if self.routing_filter not in ("cbf", "direct"):
            raise BrokerError(f"routing_filter must be 'cbf' or 'direct', got "
                              f"{self.routing_filter!r}", field="routing_filter",
                              value=self.routing_filter)
        if self.mode == "paper" and self.routing_filter != "cbf":
            raise BrokerError("paper mode routes on CBFs: routing_filter must be 'cbf'",
                              field="routing_filter", value=self.routing_filter)
        for field in ("match_threads", "update_threads"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BrokerError(f"{field} must be a positive integer, got {value!r}",
                                  field=field, value=value)
        for part in ("client", "routing"):
            check_target(getattr(self, f"{part}_fp_target"), f"{part}_fp_target")

    @classmethod
    def from_space(cls, space: ContentSpace, **overrides: Any) -> BrokerConfig:
        """Filter sizes from the space spec's ``filters`` object, then ``overrides``."""
        f = space.filters
        kw: dict[str, Any] = {"counter_bits": f.counter_bits, "seed": f.seed}
        for part in ("client", "routing"):
            kw[f"{part}_m"], kw[f"{part}_k"], kw[f"{part}_fp_target"] = spec_size(
                getattr(f, part))
        kw.update(overrides)
        return cls(**kw)
