"""The router measures streams with `specguard.meter` (pure, shared with `specguard evaluate`);
re-exported here so the router's modules keep one import path."""

from specguard.meter import (
    MAX_LINE_BYTES,
    Measured,
    StreamMeter,
    measure_json,
    request_domain,
    to_sample,
)

__all__ = [
    "MAX_LINE_BYTES",
    "Measured",
    "StreamMeter",
    "measure_json",
    "request_domain",
    "to_sample",
]
