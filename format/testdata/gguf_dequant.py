"""The gguf package's own dequantization, for format's parity tests.

  gguf_dequant.py blocks TYPE IN OUT  raw blocks of ggml type TYPE (IN) -> float32 little-endian (OUT)
  gguf_dequant.py file GGUF           one line per tensor: name, ggml type, sha256 of its float32 values
  gguf_dequant.py quantize TYPE IN OUT float32 little-endian (IN) -> its ggml type TYPE bytes (OUT)
"""
import hashlib
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize


def main():
    if sys.argv[1] == "blocks":
        qtype = GGMLQuantizationType(int(sys.argv[2]))
        raw = np.fromfile(sys.argv[3], dtype=np.uint8)
        out = dequantize(raw, qtype).astype("<f4", copy=False)
        out.tofile(sys.argv[4])
    elif sys.argv[1] == "file":
        for t in GGUFReader(sys.argv[2]).tensors:
            v = dequantize(t.data, t.tensor_type).astype("<f4", copy=False)
            digest = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            print(t.name, t.tensor_type.name, digest)
    elif sys.argv[1] == "quantize":
        qtype = GGMLQuantizationType(int(sys.argv[2]))
        values = np.fromfile(sys.argv[3], dtype="<f4")
        with np.errstate(over="ignore"):
            out = quantize(values, qtype)
        out.tofile(sys.argv[4])
    else:
        sys.exit("usage: gguf_dequant.py blocks TYPE IN OUT | file GGUF | quantize TYPE IN OUT")


if __name__ == "__main__":
    main()
