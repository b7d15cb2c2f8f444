#!/usr/bin/env python3
"""Fails when a folder includes a folder above it.

The layers, lowest first (each may include itself and the ones before it):
    core/  <-  kernels/ref/  <-  kernels/cpu/, kernels/cuda/  <-  engine/  <-  model/, tokenizers/
           <-  formats/  <-  lessons/, serve/  <-  cli/
Siblings (kernels/cpu/ and kernels/cuda/; model/ and tokenizers/; lessons/ and serve/) do not
include each other. tests/ and bench/ sit outside the stack and may include anything; tools/
holds scripts only.

Usage: check_layers.py SOURCE_DIR
       check_layers.py --self-test     (the check itself catches a planted upward include)
"""
import pathlib
import re
import sys

RANK = {"core": 0, "kernels/ref": 1, "kernels/cpu": 2, "kernels/cuda": 2, "engine": 3, "model": 4,
        "tokenizers": 4, "formats": 5, "lessons": 6, "serve": 6, "cli": 7}
LAYERS = list(RANK)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: str):
    for layer in sorted(LAYERS, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def self_test() -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in {"core/a.h": '#include "core/b.h"\n', "core/b.h": "",
                          "kernels/cpu/k.cpp": '#include "kernels/ref/r.h"\n', "kernels/ref/r.h": "",
                          "engine/e.cpp": '#include "model/m.h"\n', "model/m.h": "",
                          "kernels/cuda/c.cu": '#include "kernels/cpu/k.h"\n',
                          "formats/f.cpp": '#include "model/m.h"\n', "serve/s.cpp": '#include "lessons/l.h"\n',
                          "lessons/l.h": "", "model/n.cpp": '#include "tokenizers/t.h"\n', "tokenizers/t.h": ""}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        problems = scan(root)[1]
    expected = {"engine/e.cpp", "kernels/cuda/c.cu", "serve/s.cpp", "model/n.cpp"}
    found = {p.split(":")[0] for p in problems}
    if found != expected:
        print("FAIL: self-test found", sorted(found), "expected", sorted(expected))
        return 1
    print("ok: the check finds the four planted includes (one upward, three between siblings) and nothing else")
    return 0


def scan(root: pathlib.Path):
    checked, problems = 0, []
    for path in sorted(root.rglob("*")):
        if path.suffix not in {".h", ".cpp", ".cu", ".cuh"} or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        layer = layer_of(rel)
        if layer is None:
            continue
        checked += 1
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            target_layer = layer_of(target)
            if target_layer is None:
                continue
            if RANK[target_layer] > RANK[layer] or (RANK[target_layer] == RANK[layer] and target_layer != layer):
                problems.append(f"{rel}: includes {target} ({target_layer}/ is not below {layer}/)")
    return checked, problems


def main() -> int:
    if sys.argv[1] == "--self-test":
        return self_test()
    checked, problems = scan(pathlib.Path(sys.argv[1]))
    for p in problems:
        print("FAIL:", p)
    if checked == 0:
        print("FAIL: no source files found under", sys.argv[1])
        return 1
    if not problems:
        print(f"ok: {checked} files, every include points to the same layer or a lower one")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
