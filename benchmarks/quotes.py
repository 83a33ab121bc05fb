"""The stock-quote workload: the demo's space, subscriptions as a market-data desk writes them.

The space is ``docker/examples/space.json`` (``sym`` discrete over 8 symbols, ``price`` in
``[0, 1000]`` cut in 64 cells, ``change`` in ``[-20, 20]`` in 16, ``volume`` in
``[0, 1e6]`` cut at 1K/10K/100K/500K): 40,960 cells. A subscription reads like::

    sym in (IBM, TSLA) and price between 412.5 and 419.25 and change between -3.1 and 1.7

Every draw comes from one ``numpy.random.default_rng(seed)``, in this order:

* per subscription, how many symbols (1 to 3, uniform) and which (distinct, uniform);
* the price range's width, ``scale * u`` with ``u`` uniform in ``[0.5, 1.5]``, and its low
  end uniform in ``[0, 1000 - width]``; both rounded to cents;
* whether it constrains ``change`` (``change_share``), the low end uniform in
  ``[-20, 15]`` and a width uniform in ``[2, 20]`` (cut at 20), rounded to 0.1;
* whether it constrains ``volume`` (``volume_share``, the optional predicate), at least one
  of 1,000 / 10,000 / 50,000 / 200,000 (uniform);
* its owner, uniform over ``n_clients``.

``scale`` is what sets the fan-out: it is solved so that the expected number of matching
subscriptions of a uniform event is ``fanout`` (each subscription matches with probability
``symbols/8 * width/1000 * P(change) * P(volume)``, linear in the width). Deliveries are
counted per client, so an event reaching two subscriptions of one client is one delivery:
:func:`fanout_of` measures both on a sample.

Events (:func:`draw_events`): ``sym`` uniform, ``price`` uniform in ``[0, 1000)`` and
``change`` in ``[-20, 20]`` (cents), ``volume`` a uniform integer in ``[0, 1e6]``; a fresh
draw per round (a different seed), so no round routes the labels of the one before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dls.mapping import event_labels_batch
from dls.predicates import Subscription
from dls.space import ContentSpace

__all__ = ["SPACE_FILE", "SYMBOLS", "QuoteEvents", "QuotesParams", "QuotesWorkload",
           "brute_force", "draw_events", "fanout_of", "generate", "space", "space_spec"]

SPACE_FILE = Path(__file__).resolve().parent.parent / "docker" / "examples" / "space.json"
SYMBOLS = ("AAPL", "MSFT", "IBM", "GOOG", "AMZN", "TSLA", "NVDA", "META")
PRICE_HIGH = 1000.0
CHANGE_LOW, CHANGE_HIGH = -20.0, 20.0
VOLUME_HIGH = 1_000_000
VOLUME_FLOORS = np.array([1_000, 10_000, 50_000, 200_000], dtype=np.int64)


def space_spec() -> dict[str, Any]:
    """The quotes space's spec (the demo's ``space.json``)."""
    spec: dict[str, Any] = json.loads(SPACE_FILE.read_text())
    return spec


def space() -> ContentSpace:
    """The quotes space."""
    return ContentSpace.from_spec(space_spec())


@dataclass(frozen=True)
class QuotesParams:
    """Everything that determines a quotes workload (recorded with every result)."""

    n_subs: int
    n_clients: int
    fanout: float  # expected matching subscriptions of a uniform event
    change_share: float = 0.8
    volume_share: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_subs < 1 or self.n_clients < 1:
            raise ValueError(f"n_subs and n_clients must be positive, got {self.n_subs} "
                             f"and {self.n_clients}")
        if not 0 < self.fanout < self.n_subs:
            raise ValueError(f"fanout must be in (0, n_subs), got {self.fanout}")
        for name in ("change_share", "volume_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return asdict(self)


@dataclass(frozen=True)
class QuotesWorkload:
    """Subscriptions as columns; ``where(i)`` is subscription ``i``'s text.

    ``syms``: ``(n, 8)`` bool, the symbols each names; ``price``, ``change``: ``(n, 2)``
    bounds (``change`` ``[-inf, inf]`` where unconstrained); ``volume``: the lower bound
    (-1: unconstrained); ``owners``: client indexes.
    """

    params: QuotesParams
    scale: float  # mean price width
    syms: np.ndarray
    price: np.ndarray
    change: np.ndarray
    volume: np.ndarray
    owners: np.ndarray

    def __len__(self) -> int:
        """How many subscriptions."""
        return len(self.owners)

    def where(self, i: int) -> str:
        """Subscription ``i`` in the text form."""
        names = [SYMBOLS[j] for j in np.flatnonzero(self.syms[i])]
        parts = [f"sym in ({', '.join(names)})" if len(names) > 1 else f"sym = {names[0]}",
                 f"price between {_num(self.price[i, 0])} and {_num(self.price[i, 1])}"]
        if np.isfinite(self.change[i, 0]):
            parts.append(f"change between {_num(self.change[i, 0])} and "
                         f"{_num(self.change[i, 1])}")
        if self.volume[i] >= 0:
            parts.append(f"volume >= {int(self.volume[i])}")
        return " and ".join(parts)

    def client(self, i: int) -> str:
        """The name of subscription ``i``'s client."""
        return client_name(int(self.owners[i]))

    def labels(self, i: int, sp: ContentSpace | None = None) -> np.ndarray:
        """Subscription ``i``'s labels, as the SDK maps them (its ``where`` compiled)."""
        return Subscription(sp or space(), self.where(i)).labels()


def client_name(index: int) -> str:
    """The name of client ``index``."""
    return f"q{index:05d}"


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _decimal(x: np.ndarray, places: int) -> np.ndarray:
    """``x`` rounded to ``places`` decimals, each the double its text parses to.

    (``np.round`` may land one unit in the last place away from it: a bound written in a
    where text and read back would then differ from the one brute force compares with.)
    """
    return np.array([float(f"{v:.{places}f}") for v in x.tolist()], dtype=np.float64)


def generate(p: QuotesParams) -> QuotesWorkload:
    """Draw a workload (deterministic in ``p``)."""
    rng = np.random.default_rng(p.seed)
    n = p.n_subs
    k = rng.integers(1, 4, size=n)
    order = np.argsort(rng.random((n, len(SYMBOLS))), axis=1)
    syms = np.zeros((n, len(SYMBOLS)), dtype=bool)
    rows = np.arange(n)
    for j in range(3):
        pick = k > j
        syms[rows[pick], order[pick, j]] = True
    u = rng.uniform(0.5, 1.5, size=n)
    start = rng.random(n)
    has_change = rng.random(n) < p.change_share
    c_lo = _decimal(rng.uniform(CHANGE_LOW, 15.0, size=n), 1)
    c_hi = np.minimum(CHANGE_HIGH, _decimal(c_lo + rng.uniform(2.0, 20.0, size=n), 1))
    has_volume = rng.random(n) < p.volume_share
    v_lo = VOLUME_FLOORS[rng.integers(0, len(VOLUME_FLOORS), size=n)]
    owners = rng.integers(0, p.n_clients, size=n, dtype=np.int64)
    p_change = np.where(has_change, (c_hi - c_lo) / (CHANGE_HIGH - CHANGE_LOW), 1.0)
    p_volume = np.where(has_volume, (VOLUME_HIGH - v_lo + 1) / (VOLUME_HIGH + 1), 1.0)
    per_width = k / len(SYMBOLS) * u / PRICE_HIGH * p_change * p_volume
    scale = float(p.fanout / per_width.sum())
    if scale * 1.5 > PRICE_HIGH / 2:
        raise ValueError(f"fanout {p.fanout} needs price ranges {scale:.0f} wide on average "
                         f"with {n} subscriptions: too wide for [0, {PRICE_HIGH:.0f}]")
    width = _decimal(scale * u, 2)
    lo = _decimal(start * (PRICE_HIGH - width), 2)
    price = np.stack([lo, np.minimum(PRICE_HIGH, _decimal(lo + width, 2))], axis=1)
    change = np.where(has_change[:, None], np.stack([c_lo, c_hi], axis=1), [-np.inf, np.inf])
    volume = np.where(has_volume, v_lo, -1)
    return QuotesWorkload(p, scale, syms, price, change, volume, owners)


@dataclass(frozen=True)
class QuoteEvents:
    """Events as columns, with their labels (``sym`` as symbol indexes)."""

    sym: np.ndarray
    price: np.ndarray
    change: np.ndarray
    volume: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        """How many events."""
        return len(self.sym)

    def attrs(self, i: int) -> dict[str, Any]:
        """Event ``i``'s attributes, as a publisher sends them."""
        return {"sym": SYMBOLS[int(self.sym[i])], "price": float(self.price[i]),
                "change": float(self.change[i]), "volume": int(self.volume[i])}


def draw_events(n: int, seed: int, sp: ContentSpace | None = None) -> QuoteEvents:
    """``n`` uniform events (``seed``: a fresh one per round) and their labels."""
    rng = np.random.default_rng(seed)
    sym = rng.integers(0, len(SYMBOLS), size=n)
    price = np.minimum(_decimal(rng.uniform(0.0, PRICE_HIGH, size=n), 2), PRICE_HIGH - 0.01)
    change = _decimal(rng.uniform(CHANGE_LOW, CHANGE_HIGH, size=n), 2)
    volume = rng.integers(0, VOLUME_HIGH + 1, size=n)
    sym_names = np.array(SYMBOLS, dtype=object)[sym]
    labels, valid = event_labels_batch(sp or space(), {
        "sym": sym_names, "price": price, "change": change, "volume": volume})
    assert valid.all()  # noqa: S101 - every value drawn lies in the space
    return QuoteEvents(sym, price, change, volume, labels)


def brute_force(w: QuotesWorkload, ev: QuoteEvents, i: int) -> np.ndarray:
    """The subscriptions event ``i`` matches exactly (every one checked, numpy)."""
    ok = w.syms[:, int(ev.sym[i])].copy()
    ok &= (w.price[:, 0] <= ev.price[i]) & (ev.price[i] <= w.price[:, 1])
    ok &= (w.change[:, 0] <= ev.change[i]) & (ev.change[i] <= w.change[:, 1])
    ok &= w.volume <= ev.volume[i]
    return np.flatnonzero(ok)


def fanout_of(w: QuotesWorkload, ev: QuoteEvents, n: int = 500) -> tuple[float, float]:
    """Mean matching subscriptions and mean deliveries (distinct clients) per event."""
    n = min(n, len(ev))
    subs = clients = 0
    for i in range(n):
        hit = brute_force(w, ev, i)
        subs += len(hit)
        clients += len(np.unique(w.owners[hit]))
    return subs / n, clients / n
