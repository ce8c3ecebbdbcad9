#!/usr/bin/env python3
"""Regenerates tests/data/ from the project's shared reference folder (fixtures made with
llama.cpp; see tests/data/README.md). Developers run this when the reference data changes; the
build and the tests never read the shared folder.

  python3 tools/vendor_test_data.py [SHARED_DIR]      (default: $GEM_SHARED_DIR, then ../shared)

What it writes (stdlib only, deterministic):
  models.json        per fixture model: the gem synth command that rewrites it and the SHA-256 of
                     its tensor data (all tensors in name order, and each tensor), computed here
                     from the fixture GGUF that llama.cpp's outputs were made on
  outputs/<tag>/<prompt>.json   llama.cpp's case files (prompt, greedy, top-20 lists), minified,
                     "full_logits" reduced to the rows kept below
  outputs/<tag>/<prompt>.pos<P>.logits16   the kept full-logit rows: "GEMLGT16", u32 n, f32
                     scale, then n int16 (value = q * scale; scale = max|z| / 32767)
  manifest.json, tolerances.json, tokenizer/, chat/, quant/, mtp/ (spec_check.json, draft/)
                     copied as they are
"""
import hashlib
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data")

# The gem synth command of each fixture model (tests/CMakeLists.txt writes them at build time).
MODELS = {
    "tiny-q4_0": ["--profile", "tiny", "--seed", "1"],
    "tiny6-f32": ["--profile", "tiny6", "--layout", "f32", "--seed", "2"],
    "tiny256-q6_k": ["--profile", "tiny256", "--embedding", "q6_k", "--seed", "3"],
    "tiny-q4_0-assistant": ["--assistant-for", "tiny-q4_0.gguf", "--seed", "1"],
}
MODEL_FILES = {"tiny-q4_0": "tiny-q4_0.gguf", "tiny6-f32": "tiny6-f32.gguf",
               "tiny256-q6_k": "tiny256-q6_k.gguf", "tiny-q4_0-assistant": "mtp/tiny-q4_0-assistant.gguf"}

# Full-logit rows kept per tag (the rest of the reference stays as top-20 lists at every position):
# the last position of the longest prompt, a position past the sliding windows, and a short or
# no-<bos> case. 512 KiB each.
KEEP_ROWS = {
    "tiny-q4_0": {"long": [109, 48], "no_bos": [0]},
    "tiny-q4_0.exact": {"long": [109, 48], "no_bos": [0]},
    "tiny6-f32": {"long": [109, 24], "short": [5]},
    "tiny256-q6_k": {"long": [109]},
    "tiny256-q6_k.exact": {"long": [109]},
}

TYPE_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 14: (256, 210), 30: (1, 2)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def tensor_digests(path):
    """(total, [(name, sha256)]): each tensor's data bytes, and all of them concatenated, tensors
    in name order (llama-quantize writes tensors in another order than gguf_synth.py)."""
    f = open(path, "rb").read()
    assert f[:4] == b"GGUF", path
    _ver, n_tensors, n_kv = struct.unpack_from("<IQQ", f, 4)
    pos = 24

    def string(pos):
        n, = struct.unpack_from("<Q", f, pos)
        return f[pos + 8:pos + 8 + n].decode(), pos + 8 + n

    def skip(t, pos):
        if t == 8:
            return string(pos)[1]
        if t == 9:
            at, n = struct.unpack_from("<IQ", f, pos)
            pos += 12
            for _ in range(n):
                pos = skip(at, pos)
            return pos
        return pos + SCALAR[t]

    align = 32
    for _ in range(n_kv):
        key, pos = string(pos)
        t, = struct.unpack_from("<I", f, pos)
        pos += 4
        if key == "general.alignment":
            align, = struct.unpack_from("<I", f, pos)
        pos = skip(t, pos)
    infos = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        nd, = struct.unpack_from("<I", f, pos)
        ne = struct.unpack_from("<%dQ" % nd, f, pos + 4)
        t, off = struct.unpack_from("<IQ", f, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, t, ne, off))
    base = (pos + align - 1) // align * align
    total = hashlib.sha256()
    per = []
    for name, t, ne, off in sorted(infos):
        n = 1
        for d in ne:
            n *= d
        be, bb = TYPE_BLOCK[t]
        data = f[base + off:base + off + n // be * bb]
        total.update(data)
        per.append([name, hashlib.sha256(data).hexdigest()])
    return total.hexdigest(), per


def write_logits16(src, dst):
    raw = open(src, "rb").read()
    n = len(raw) // 4
    vals = struct.unpack("<%df" % n, raw)
    amax = max(abs(v) for v in vals)
    scale = amax / 32767.0 if amax > 0 else 1.0
    scale = struct.unpack("<f", struct.pack("<f", scale))[0]  # the float32 the reader sees
    q = [max(-32767, min(32767, int(round(v / scale)))) for v in vals]
    with open(dst, "wb") as o:
        o.write(b"GEMLGT16" + struct.pack("<If", n, scale) + struct.pack("<%dh" % n, *q))


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GEM_SHARED_DIR", os.path.join(HERE, "..", "..", "shared"))
    fx = os.path.join(shared, "fixtures")
    if not os.path.isdir(fx):
        sys.exit(f"vendor_test_data: {fx}: no fixtures folder (pass the shared folder as the argument)")
    os.makedirs(OUT, exist_ok=True)
    for entry in os.listdir(OUT):  # everything but the hand-written README.md
        if entry != "README.md":
            p = os.path.join(OUT, entry)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    models = {}
    for name, args in MODELS.items():
        path = os.path.join(fx, MODEL_FILES[name])
        total, per = tensor_digests(path)
        models[name] = {"synth": args, "file": name + ".gguf", "source_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                        "tensor_data_sha256": total, "tensors": per}
        print(f"{name}: {len(per)} tensors, tensor data {total[:16]}…")
    with open(os.path.join(OUT, "models.json"), "w") as o:
        json.dump(models, o, indent=1)
        o.write("\n")

    for tag, keep in KEEP_ROWS.items():
        src_dir = os.path.join(fx, "outputs", tag)
        dst_dir = os.path.join(OUT, "outputs", tag)
        os.makedirs(dst_dir)
        for fn in sorted(os.listdir(src_dir)):
            if not fn.endswith(".json"):
                continue
            prompt = fn[:-5]
            case = json.load(open(os.path.join(src_dir, fn)))
            rows = []
            for full in case["full_logits"]:
                if full["pos"] in keep.get(prompt, []):
                    out_name = f"{prompt}.pos{full['pos']}.logits16"
                    write_logits16(os.path.join(src_dir, full["file"]), os.path.join(dst_dir, out_name))
                    rows.append({"pos": full["pos"], "file": out_name})
            missing = set(keep.get(prompt, [])) - {r["pos"] for r in rows}
            assert not missing, (tag, prompt, missing)
            case["full_logits"] = rows
            with open(os.path.join(dst_dir, fn), "w") as o:
                json.dump(case, o, separators=(",", ":"))

    for rel in ["manifest.json", "tolerances.json", "tokenizer", "chat", "quant", "mtp/spec_check.json", "mtp/draft",
                "mtp/README.md"]:
        src, dst = os.path.join(fx, rel), os.path.join(OUT, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(src, dst)
    for root, dirs, files in os.walk(OUT):  # plain modes (the shared folder is read-only)
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)


if __name__ == "__main__":
    main()
