#!/usr/bin/env python3
"""tools/check_layers.py on small made-up trees (each rule fails alone) and on the real src/."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "check_layers.py")
spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)


def make_tree(files):
    """files: {relative path: text}; returns the src directory of a new temporary tree."""
    d = tempfile.mkdtemp()
    for rel, text in files.items():
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return d


TREE = {
    "base/status.h": "#include <string>\n",
    "chat/chat.h": '#include "base/status.h"\n#include "chat/parser.h"\n',
    "chat/parser.h": "",
    "backend/cpu/cpu.h": '#include "backend/backend.h"\n',
    "backend/backend.h": '#include "base/status.h"\n',
}
EXACT = {"base": set(), "chat": {"base"}, "backend": {"base"}, "backend/cpu": {"backend"}}


class CheckLayers(unittest.TestCase):
    def test_exact_table_passes(self):
        self.assertEqual(check_layers.check(make_tree(TREE), EXACT), [])

    def test_unused_permission_fails(self):
        table = dict(EXACT, chat={"base", "backend"})
        problems = check_layers.check(make_tree(TREE), table)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("ALLOWED['chat'] permits backend/", problems[0])
        self.assertIn("unused permission", problems[0])

    def test_violation_fails_naming_the_line(self):
        tree = dict(TREE)
        tree["base/status.h"] = '#include <string>\n#include "chat/chat.h"\n'
        problems = check_layers.check(make_tree(tree), EXACT)
        self.assertEqual(problems, ["src/base/status.h:2: base may not include chat/ "
                                    "(allowed: the standard library)"])

    def test_unlisted_folder_and_stale_row_fail(self):
        tree = dict(TREE, **{"server/api.h": '#include "chat/chat.h"\n'})
        problems = check_layers.check(make_tree(tree), dict(EXACT, runtime=set()))
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("src/server: a folder the layering table does not list", problems[0])
        self.assertIn("ALLOWED['runtime']: no such folder", problems[1])

    def test_real_tree_passes(self):
        self.assertEqual(check_layers.check(os.path.join(ROOT, "src"), check_layers.ALLOWED), [])
        rc = subprocess.run([sys.executable, SCRIPT, os.path.join(ROOT, "src")]).returncode
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
