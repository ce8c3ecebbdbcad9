#!/usr/bin/env python3
"""Fails when the #include arrows between the folders of src/ differ from the table below.

ALLOWED lists, for each folder under src/ (backend/cpu and backend/cuda count as folders of their
own), exactly the other folders whose headers its sources include. It is checked both ways:
  * an include of a folder not listed is a layering violation;
  * a listed folder that no source includes is an unused permission, also a failure: the table
    says what the code does, so a dependency cannot come back silently later;
  * a folder of src/ missing from the table, or a table row with no folder, is a failure too.
When the code gains or drops an arrow on purpose, update the row (STYLE.md section 2 describes
the layers).

usage: check_layers.py SRC_DIR
"""
import os
import re
import sys

ALLOWED = {
    "base": set(),
    "gguf": {"base"},
    "model": {"base", "gguf"},
    "tokenizer": {"base", "gguf"},
    "chat": {"base", "tokenizer"},
    "sampler": set(),
    "backend": {"base", "model"},
    "backend/cpu": {"base", "model", "backend"},
    "backend/cuda": {"base", "model", "backend", "sampler"},
    "runtime": {"base", "model", "tokenizer", "sampler", "backend"},
    "server": {"base", "tokenizer", "chat", "sampler", "runtime"},
    "cli": {"base", "gguf", "model", "tokenizer", "chat", "backend", "backend/cpu", "backend/cuda",
            "runtime", "server"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")


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


def scan(src):
    """Returns ({folder: {target: first 'path:line'}}, set of folders holding sources)."""
    arrows = {}
    folders = set()
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            if "/" not in rel:
                continue  # a file directly in src/ belongs to no layer
            folder = folder_of(rel)
            folders.add(folder)
            with open(path, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    tgt = target_folder(m.group(1))
                    if tgt is None or tgt == folder:
                        continue
                    arrows.setdefault(folder, {}).setdefault(tgt, f"src/{rel}:{lineno}")
    return arrows, folders


def check(src, allowed):
    """The list of problems (empty when the code and the table agree)."""
    arrows, folders = scan(src)
    problems = []
    for folder in sorted(folders - set(allowed)):
        problems.append(f"src/{folder}: a folder the layering table does not list; add a row "
                        f"to ALLOWED in tools/check_layers.py")
    for folder in sorted(set(allowed) - folders):
        problems.append(f"ALLOWED['{folder}']: no such folder with sources under src/; remove "
                        f"the row")
    for folder in sorted(folders & set(allowed)):
        used = arrows.get(folder, {})
        permitted = allowed[folder]
        for tgt in sorted(set(used) - permitted):
            problems.append(f"{used[tgt]}: {folder} may not include {tgt}/ (allowed: "
                            f"{', '.join(sorted(permitted)) or 'the standard library'})")
        for tgt in sorted(permitted - set(used)):
            problems.append(f"ALLOWED['{folder}'] permits {tgt}/, which no source of src/{folder} "
                            f"includes: an unused permission; remove it")
    return problems


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    problems = check(sys.argv[1], ALLOWED)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
