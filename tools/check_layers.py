#!/usr/bin/env python3
"""Fails when an #include in src/ crosses the layering of STYLE.md section 2.

Each folder under src/ may include headers of the folders listed for it (and its own).
"""
import os
import re
import sys

ALLOWED = {
    "base": set(),
    "gguf": {"base"},
    "model": {"base", "gguf"},
    "tokenizer": {"base", "gguf"},
    "chat": {"base", "gguf", "tokenizer"},
    "sampler": {"base"},
    "backend": {"base", "gguf", "model"},
    "backend/cpu": {"base", "gguf", "model", "backend"},
    "backend/cuda": {"base", "gguf", "model", "backend", "sampler"},
    "runtime": {"base", "gguf", "model", "tokenizer", "chat", "sampler", "backend"},
    "server": {"base", "gguf", "model", "tokenizer", "chat", "sampler", "backend", "runtime"},
    "cli": None,  # everything
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    parts = rel.split("/")
    if len(parts) >= 3 and parts[0] == "backend":
        return parts[0] + "/" + parts[1]
    return parts[0]


def target_folder(inc):
    parts = inc.split("/")
    if len(parts) >= 3 and parts[0] == "backend":
        return parts[0] + "/" + parts[1]
    if len(parts) >= 2:
        return parts[0]
    return None


def main():
    src = sys.argv[1]
    bad = []
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            folder = folder_of(rel)
            allowed = ALLOWED.get(folder)
            if allowed is None:
                continue
            with open(path, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    tgt = target_folder(m.group(1))
                    if tgt is None or tgt == folder or tgt in allowed:
                        continue
                    bad.append(f"src/{rel}:{lineno}: {folder} may not include {m.group(1)} "
                               f"(allowed: {', '.join(sorted(allowed)) or 'the standard library'})")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
