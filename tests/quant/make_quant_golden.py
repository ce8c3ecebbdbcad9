#!/usr/bin/env python3
"""Writes data/synth_quant_golden.bin: rows of float32 inputs with the Q8_0 and Q4_0 bytes that
shared/tools/gguf_synth.py's quant_q8_0 / quant_q4_0 produce for them (the reference gem's
quantize_row_q8_0 / quantize_row_q4_0 must match byte for byte).

Layout (little-endian): u32 n_rows, u32 row_len, f32 inputs[n_rows*row_len],
Q8_0 bytes[n_rows*row_len/32*34], Q4_0 bytes[n_rows*row_len/32*18].
Run: /usr/bin/python3 tests/quant/make_quant_golden.py ../shared/tools
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "../shared/tools")
import gguf_synth  # noqa: E402

ROW = 96
rng = np.random.default_rng(20261130)
rows = []
rows.append(np.zeros(ROW, np.float32))
rows.append(-np.zeros(ROW, np.float32))
rows.append(np.full(ROW, 0.3, np.float32))
rows.append(np.full(ROW, -1.7, np.float32))
rows.append(np.linspace(-3, 5, ROW).astype(np.float32))
for scale in (1.0, 0.02, 1e-6, 300.0):
    rows.append((rng.standard_normal(ROW) * scale).astype(np.float32))
r = rng.standard_normal(ROW).astype(np.float32)
r[5] = 40.0
rows.append(r)
# Equal magnitudes of both signs (argmax tie: the first one wins), a leading -0.
r = rng.standard_normal(ROW).astype(np.float32)
r[3], r[9], r[40], r[33] = -4.0, 4.0, 2.5, -2.5
r[64] = -0.0
rows.append(r)
# Exact halves after scaling (ties of rint and of floor(x + 8.5)).
r = (np.arange(ROW) % 32 - 16).astype(np.float32) * np.float32(0.5)
rows.append(r)
r = (rng.integers(-254, 255, ROW) / 2.0).astype(np.float32)
r[::32] = 127.0
rows.append(r)
# Tiny values (fp16 subnormal scales) and large ones.
rows.append((rng.standard_normal(ROW) * 1e-9).astype(np.float32))
rows.append((rng.standard_normal(ROW) * 1e4).astype(np.float32))
for _ in range(16):
    rows.append((rng.standard_normal(ROW) * rng.uniform(0.001, 10)).astype(np.float32))
x = np.stack(rows).astype(np.float32)
q8 = np.concatenate([gguf_synth.quant_q8_0(row) for row in x])
q4 = np.concatenate([gguf_synth.quant_q4_0(row) for row in x])
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "synth_quant_golden.bin")
with open(out, "wb") as f:
    f.write(struct.pack("<II", x.shape[0], ROW))
    f.write(x.astype("<f4").tobytes())
    f.write(q8.tobytes())
    f.write(q4.tobytes())
print(out, x.shape)
