"""The stream wire format (kubesoda_pe.framing) and the KUBESODA_OUTPUTS syntax."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubesoda_pe import PREAMBLE, Endpoint, FrameDecoder, ProtocolError, encode_frame, parse_outputs
from kubesoda_pe.framing import HEADER, MAX_NAME, MAX_PAYLOAD

names = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= MAX_NAME)
frames = st.lists(st.tuples(names, st.binary(max_size=300)), max_size=20)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@given(frames, st.lists(st.integers(min_value=0, max_value=10**6), max_size=30))
def test_round_trip_whatever_the_chunking(fs, cuts):
    wire = PREAMBLE + b"".join(encode_frame(s, d) for s, d in fs)
    dec = FrameDecoder()
    out = []
    for chunk in chunked(wire, cuts):
        out += dec.feed(chunk)
    assert out == fs
    assert dec.pending == 0


@given(frames.filter(bool), st.integers(min_value=1))
def test_a_cut_frame_is_never_delivered(fs, cut):
    wire = PREAMBLE + b"".join(encode_frame(s, d) for s, d in fs)
    last = len(encode_frame(*fs[-1]))
    cut = 1 + cut % last  # drop 1..len(last frame) bytes: the last frame is incomplete
    dec = FrameDecoder()
    assert dec.feed(wire[:-cut]) == fs[:-1]
    assert dec.pending == last - cut


def test_frame_layout():
    assert encode_frame("a->b", b"xyz") == b"\x00\x04\x00\x00\x00\x03a->bxyz"
    assert PREAMBLE == b"KSPE\x01"


@pytest.mark.parametrize("garbage", [b"GET /metrics HTTP/1.1\r\n", b"KSPE\x02", b"X"])
def test_a_foreign_peer_is_refused(garbage):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(garbage)


def test_oversized_or_nameless_frames_are_refused():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(PREAMBLE + HEADER.pack(4, MAX_PAYLOAD + 1) + b"a->b")
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(PREAMBLE + HEADER.pack(0, 1) + b"x")
    with pytest.raises(ValueError):
        encode_frame("", b"x")


def test_frames_before_garbage_are_delivered_then_the_error():
    dec = FrameDecoder()
    assert dec.feed(PREAMBLE + encode_frame("s", b"1") + HEADER.pack(0, 0)) == [("s", b"1")]
    with pytest.raises(ProtocolError):
        dec.feed(b"")


def test_outputs_syntax():
    got = parse_outputs(" src->mid=demo-mid.ns.svc:9000, import:up/out=[::1]:9001,src->mid=10.0.0.7|h:1|10.0.0.7:9000 ,,")
    assert got == [
        ("src->mid", [Endpoint("demo-mid.ns.svc", 9000)]),
        ("import:up/out", [Endpoint("::1", 9001)]),
        ("src->mid", [Endpoint("10.0.0.7", 9000), Endpoint("h", 1)]),
    ]
    assert parse_outputs("") == [] and parse_outputs(None) == []
    for bad in ["nohost", "a=", "=h:1", "a=h:x", "a=h:0", "a=::1:9000", "a=[::1", "a=h:1|"]:
        with pytest.raises(ValueError):
            parse_outputs(bad)


def test_the_sdk_needs_only_the_standard_library_and_prometheus_client():
    code = ("import sys, kubesoda_pe; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'soda_optimizer', 'soda_operator', 'numpy', 'pydantic', 'kopf', 'kubernetes', 'yaml', 'aiohttp'}); "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
