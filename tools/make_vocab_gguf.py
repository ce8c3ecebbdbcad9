#!/usr/bin/env python3
"""make_vocab_gguf.py - write gem's vocab-only GGUF (data/gemma4-vocab.gguf).

Copies every tokenizer.* key/value record byte for byte from a Gemma 4 GGUF (llama.cpp's
models/ggml-vocab-gemma-4.gguf, or any gemma4 model file such as the fixtures' tiny-q4_0.gguf,
whose tokenizer keys are that file's) into a GGUF v3 file with no tensors, after three general.*
keys of our own. Standard library only; the records are never decoded, so nothing can change.

  python3 tools/make_vocab_gguf.py SOURCE.gguf -o data/gemma4-vocab.gguf
"""

import argparse
import os
import struct
import sys

MAGIC = b"GGUF"
T_STR, T_ARR = 8, 9
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_kv_records(buf):
    """Yield (key, raw bytes of the whole record) for every metadata entry."""
    if buf[:4] != MAGIC:
        raise ValueError("not a GGUF file")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}, expected 2 or 3")
    pos = 24

    def skip_str(p):
        (n,) = struct.unpack_from("<Q", buf, p)
        return p + 8 + n

    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + klen].decode("utf-8")
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if vtype == T_STR:
            pos = skip_str(pos)
        elif vtype == T_ARR:
            etype, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if etype == T_STR:
                for _ in range(n):
                    pos = skip_str(pos)
            elif etype in SCALAR_SIZE:
                pos += n * SCALAR_SIZE[etype]
            else:
                raise ValueError(f"{key}: array of type {etype} not supported")
        elif vtype in SCALAR_SIZE:
            pos += SCALAR_SIZE[vtype]
        else:
            raise ValueError(f"{key}: value type {vtype} not supported")
        if pos > len(buf):
            raise ValueError(f"{key}: record runs past the end of the file")
        yield key, buf[start:pos]


def str_record(key, value):
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", T_STR) + struct.pack("<Q", len(v)) + v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a Gemma 4 GGUF holding the tokenizer.* keys")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    with open(a.source, "rb") as f:
        buf = f.read()
    records = [(k, raw) for k, raw in read_kv_records(buf) if k.startswith("tokenizer.")]
    keys = [k for k, _ in records]
    if "tokenizer.ggml.model" not in keys or "tokenizer.ggml.tokens" not in keys:
        sys.exit(f"{a.source}: no tokenizer.ggml.model / tokenizer.ggml.tokens keys")
    general = [str_record("general.architecture", "gemma4"),
               str_record("general.type", "vocab"),
               str_record("general.name", "Gemma 4 tokenizer")]
    n_kv = len(general) + len(records)
    body = MAGIC + struct.pack("<IQQ", 3, 0, n_kv) + b"".join(general) + b"".join(r for _, r in records)
    body += b"\0" * ((-len(body)) % 32)  # data section alignment (empty data section)
    tmp = a.output + ".part"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, a.output)
    print(f"{a.output}: {len(records)} tokenizer keys ({', '.join(keys)}), {len(body)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
