"""A learner's observation (:class:`Sample`, re-exported by :mod:`.model`) and a node's sample window
stored compactly (issue 52 item 4): one float64 row per sample, not one pydantic object per sample.

At 7,000 PEs the learner held ~1.8 M :class:`Sample` objects (256 per PE, the levels of one PE's
path sharing them): ~1.2 kB each with their dicts, 2.1 GB in all (over the chart's 1 GiB limit),
and two objects per sample for every full pass of Python's cyclic garbage collector to walk
(1.56 CPU s a pass, landing in the learning cycle; docs/benchmarks/learning-memory.md). A
:class:`SampleWindow` keeps them as one read-only ``(n, 7)`` array, :data:`COLUMNS` (56 bytes a
sample; ``None`` is NaN, which a :class:`Sample` never holds; ``censored`` 0 or 1): one object
the collector tracks per node, not 512 (a numpy array of floats is not tracked).

It is a ``Sequence[Sample]``: indexing and iteration materialise :class:`Sample` objects
(the same values; a sample's ``model_fields_set`` is not kept), slicing gives a window. The
materialised samples of the last few windows are cached (:func:`_materialised`, keyed by content),
so a refit that reads its window several times builds them once; the code that can take columns
does (:func:`table`, :func:`columns`, :func:`times`). A window is immutable: the learner replaces a node's window
(:meth:`merged`, :meth:`kept`), so nodes holding the same samples share one window
(:meth:`soda_optimizer.learn.Learner.observe`) and copies of a model may share it too.

In a pydantic model a field typed ``SampleWindow`` validates a list of samples (or dicts) as
``list[Sample]`` did, with the same errors, and serialises to that list: the learner's exported
state and ``status.model`` are unchanged.

Pure: no I/O.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema


class Sample(BaseModel):
    """One observation of a PE over an observation window (tuples/s and mips)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    r_i: float = Field(ge=0, allow_inf_nan=False)  # combined input rate; a source's offered primal rate
    m: float = Field(ge=0, allow_inf_nan=False)  # mips allocated
    r_o: float = Field(ge=0, allow_inf_nan=False)  # output rate (before per-stream selectivity)
    m_used: float | None = Field(default=None, ge=0, allow_inf_nan=False)  # mips used, when measured
    t: float | None = Field(default=None, allow_inf_nan=False)  # seconds; None: the time of the observe call
    # issue 38, backpressure (docs/learn.md, "Which rate is the input rate"): the rate the PE took in
    # when the offered rate r_i was measured apart from it, and whether r_i is only a lower bound
    # (a saturated PE with no offered series: what it received is what it processed)
    r_p: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    censored: bool = False


COLUMNS = ("r_i", "m", "r_o", "m_used", "t", "r_p", "censored")
_EMPTY = np.empty((0, len(COLUMNS)), dtype=float)
_EMPTY.flags.writeable = False


class Columns(NamedTuple):
    """A window's columns (read-only float arrays; NaN where a sample has None; ``censored`` bool)."""

    r_i: np.ndarray
    m: np.ndarray
    r_o: np.ndarray
    m_used: np.ndarray
    t: np.ndarray
    r_p: np.ndarray
    censored: np.ndarray


def _rows(samples: Iterable[Sample]) -> np.ndarray:
    rows = [(s.r_i, s.m, s.r_o, np.nan if s.m_used is None else s.m_used, np.nan if s.t is None else s.t,
             np.nan if s.r_p is None else s.r_p, 1.0 if s.censored else 0.0) for s in samples]
    return np.array(rows, dtype=float).reshape(-1, len(COLUMNS))


class SampleWindow(Sequence[Sample]):
    """A read-only sequence of samples stored as one array (see the module's docstring)."""

    __slots__ = ("_a", "_key")

    def __init__(self, data: np.ndarray | None = None) -> None:
        a = _EMPTY if data is None or len(data) == 0 else np.ascontiguousarray(data, dtype=float)
        if a.ndim != 2 or a.shape[1] != len(COLUMNS):
            raise ValueError(f"a sample window is an (n, {len(COLUMNS)}) array, not {a.shape}")
        if a is not _EMPTY:
            a.flags.writeable = False
        self._a = a
        self._key: bytes | None = None

    @classmethod
    def of(cls, samples: Iterable[Sample] | SampleWindow) -> SampleWindow:
        """``samples`` as a window (a window as is)."""
        return samples if isinstance(samples, SampleWindow) else cls(_rows(samples))

    # ------------------------------------------------------------ the sequence
    def __len__(self) -> int:
        return int(self._a.shape[0])

    @overload
    def __getitem__(self, i: int) -> Sample: ...

    @overload
    def __getitem__(self, i: slice) -> SampleWindow: ...

    def __getitem__(self, i: int | slice) -> Sample | SampleWindow:
        if isinstance(i, slice):
            return SampleWindow(self._a[i])
        return _sample(self._a[i].tolist())

    def __iter__(self) -> Iterator[Sample]:
        return iter(_materialised(self)) if len(self) else iter(())

    def __eq__(self, other: object) -> bool:
        """The same stored values (bit for bit); against a list or tuple, the same samples."""
        if isinstance(other, SampleWindow):
            return self._a.shape == other._a.shape and bool(np.array_equal(self._a.view(np.int64), other._a.view(np.int64)))
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"SampleWindow({len(self)} samples)"

    def __copy__(self) -> SampleWindow:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> SampleWindow:
        return self

    # ------------------------------------------------------------ columns and identity
    def key(self) -> bytes:
        """A digest of the stored values: equal windows, equal keys (a refit's memo, :meth:`Learner._refit`)."""
        if self._key is None:
            self._key = hashlib.blake2b(self._a.data, digest_size=16).digest() + len(self).to_bytes(4, "little")
        return self._key

    @property
    def array(self) -> np.ndarray:
        """The stored ``(n, 7)`` array (read-only), columns :data:`COLUMNS`."""
        return self._a

    @property
    def nbytes(self) -> int:
        return int(self._a.nbytes)

    def columns(self) -> Columns:
        a = self._a
        return Columns(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5], a[:, 6] > 0)

    # ------------------------------------------------------------ the learner's updates (new windows)
    def merged(self, batch: Sequence[Sample], now: float) -> SampleWindow:
        """This window and ``batch`` in time order (a sample without ``t`` at ``now``; stable: at the
        same time, this window's samples first), as ``sorted([*window, *batch], key=t or now)``."""
        if not batch:
            return self
        a = np.concatenate([self._a, _rows(batch)]) if len(self) else _rows(batch)
        order = np.argsort(np.where(np.isnan(a[:, 4]), now, a[:, 4]), kind="stable")
        return SampleWindow(a[order])

    def kept(self, keep: np.ndarray, newest: int) -> SampleWindow:
        """The samples where ``keep`` is True, at most the ``newest`` of them (a copy of its own)."""
        a = self._a[np.asarray(keep, dtype=bool)]
        return SampleWindow(a[max(0, len(a) - newest):].copy())


def _sample(row: list[float]) -> Sample:
    r_i, m, r_o, mu, t, rp, c = row
    return Sample(r_i=r_i, m=m, r_o=r_o, m_used=None if mu != mu else mu, t=None if t != t else t,
                  r_p=None if rp != rp else rp, censored=c > 0)


@functools.lru_cache(maxsize=8)
def _materialised(window: SampleWindow) -> tuple[Sample, ...]:
    """The samples of a window as objects, cached for the last few windows read (by content): a
    refit reads its window several times, and a slice read twice is the same slice."""
    return tuple(_sample(r) for r in window.array.tolist())


def table(samples: Sequence[Sample]) -> np.ndarray:
    """The ``(n, 7)`` array of a window (its own, read-only), or of a plain sequence of samples (:data:`COLUMNS`)."""
    return samples.array if isinstance(samples, SampleWindow) else _rows(samples)


def columns(samples: Sequence[Sample]) -> Columns:
    """The columns of a window, or of a plain sequence of samples."""
    return (samples if isinstance(samples, SampleWindow) else SampleWindow.of(samples)).columns()


def times(samples: Sequence[Sample], now: float) -> np.ndarray:
    """Each sample's time, ``now`` for a sample without one (:func:`.fit.age_weights`)."""
    if isinstance(samples, SampleWindow):
        t = samples.columns().t
        return np.where(np.isnan(t), now, t)
    return np.array([now if s.t is None else s.t for s in samples], dtype=float)


def window_key(samples: Sequence[Sample]) -> Any:
    """What identifies a window's content for a memo: its digest (a plain list: its objects)."""
    return samples.key() if isinstance(samples, SampleWindow) else tuple(map(id, samples))


def _pydantic_schema(cls: type[SampleWindow], source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    as_list = handler.generate_schema(list[Sample])

    def validate(v: Any, inner: core_schema.ValidatorFunctionWrapHandler) -> SampleWindow:
        if isinstance(v, SampleWindow):
            return v
        return SampleWindow.of(inner(v))

    return core_schema.no_info_wrap_validator_function(
        validate, as_list, serialization=core_schema.plain_serializer_function_ser_schema(list, return_schema=as_list))


SampleWindow.__get_pydantic_core_schema__ = classmethod(_pydantic_schema)  # type: ignore[attr-defined]
