"""The wire format of a kubesoda stream connection (docs/pe-metrics.md, "Transport").

A connection opens with a 5-byte preamble, ``b"KSPE"`` and the format version (1), then carries
frames back to back, each::

    uint16 big-endian  S: length of the stream name in bytes (1..MAX_NAME)
    uint32 big-endian  N: length of the payload in bytes (0..MAX_PAYLOAD)
    S bytes            the stream name, UTF-8 (the ``stream`` label, e.g. ``src->mid``)
    N bytes            the payload (one tuple), opaque to the SDK

Only the producer writes; the consumer never answers. A connection ends at a frame boundary or
is cut: an incomplete last frame is discarded, never delivered.
"""

from __future__ import annotations

import struct

PREAMBLE = b"KSPE\x01"
HEADER = struct.Struct("!HI")
MAX_NAME = 1024
MAX_PAYLOAD = 64 * 1024 * 1024


class ProtocolError(ValueError):
    """The peer does not speak this format (bad preamble, oversized name or payload)."""


def encode_header(stream: str) -> bytes:
    """The stream-name part of a frame's header, checked; see :func:`encode_frame`."""
    name = stream.encode()
    if not 1 <= len(name) <= MAX_NAME:
        raise ValueError(f"stream name must be 1..{MAX_NAME} bytes in UTF-8: {stream!r}")
    return name


def encode_frame(stream: str, data: bytes | bytearray | memoryview) -> bytes:
    """One frame carrying ``data`` on ``stream`` (without the connection preamble)."""
    name = encode_header(stream)
    if len(data) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(data)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(len(name), len(data)) + name + bytes(data)


class FrameDecoder:
    """Incremental decoder of one connection's byte stream: :meth:`feed` whatever ``recv`` returned,
    get back the (stream, payload) frames it completed. Raises :class:`ProtocolError` on garbage
    (the caller closes the connection)."""

    def __init__(self, expect_preamble: bool = True):
        self._buf = bytearray()
        self._need_preamble = expect_preamble
        self._names: dict[bytes, str] = {}
        self._error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[tuple[str, bytes]]:
        """The frames completed by ``chunk``. Garbage raises :class:`ProtocolError`, once the frames
        completed before it have been returned (by this call, the error then comes with the next)."""
        if self._error is not None:
            raise self._error
        self._buf += chunk
        out: list[tuple[str, bytes]] = []
        try:
            self._parse(out)
        except ProtocolError as e:
            if not out:
                raise
            self._error = e
        return out

    def _parse(self, out: list[tuple[str, bytes]]) -> None:
        buf = self._buf
        pos = 0
        try:
            if self._need_preamble:
                n = min(len(buf), len(PREAMBLE))
                if buf[:n] != PREAMBLE[:n]:
                    raise ProtocolError(f"bad preamble {bytes(buf[:n])!r} (not a kubesoda stream, or another version)")
                if n < len(PREAMBLE):
                    return
                self._need_preamble = False
                pos = len(PREAMBLE)
            while len(buf) - pos >= HEADER.size:
                s, n = HEADER.unpack_from(buf, pos)
                if not 1 <= s <= MAX_NAME:
                    raise ProtocolError(f"stream name length {s} out of 1..{MAX_NAME}")
                if n > MAX_PAYLOAD:
                    raise ProtocolError(f"payload length {n} exceeds {MAX_PAYLOAD}")
                end = pos + HEADER.size + s + n
                if len(buf) < end:
                    return
                raw = bytes(buf[pos + HEADER.size:pos + HEADER.size + s])
                name = self._names.get(raw)
                if name is None:
                    try:
                        name = raw.decode()
                    except UnicodeDecodeError as e:
                        raise ProtocolError(f"stream name is not UTF-8: {raw!r}") from e
                    if len(self._names) < 256:
                        self._names[raw] = name
                out.append((name, bytes(buf[end - n:end])))
                pos = end
        finally:
            del buf[:pos]
