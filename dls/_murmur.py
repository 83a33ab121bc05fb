"""MurmurHash3 x64-128 constants for 8-byte keys, shared by the numpy and compiled hashing."""

from __future__ import annotations

import numpy as np

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_LEN = np.uint64(8)
_S31 = np.uint64(31)
_S33 = np.uint64(33)
