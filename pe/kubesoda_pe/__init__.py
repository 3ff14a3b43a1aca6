"""kubesoda's PE SDK: what a processing element's Python code wraps its loop with, so PE
instances pass tuples to each other over TCP and expose the PE metrics contract
(docs/pe-metrics.md). Depends on the standard library and prometheus_client only."""

from .framing import PREAMBLE, FrameDecoder, ProtocolError, encode_frame
from .metrics import LABELS, PRIMAL, SINK, import_stream, internal_stream
from .pe import DEFAULT_METRICS_PORT, PE
from .transport import DEFAULT_STREAM_PORT, Endpoint, PEClosed, parse_endpoint, parse_outputs

__all__ = [
    "DEFAULT_METRICS_PORT", "DEFAULT_STREAM_PORT", "LABELS", "PE", "PREAMBLE", "PRIMAL", "SINK", "Endpoint",
    "FrameDecoder", "PEClosed", "ProtocolError", "encode_frame", "import_stream", "internal_stream",
    "parse_endpoint", "parse_outputs",
]
