"""Compiles every C and C++ example of the C API as written; exits non-zero naming each one that fails.

Run from the runfiles root (run_python.sh). Sources of examples:
  docs/c-api.md                                       ```c blocks: C and C++; ```cpp blocks: C++ (source tree)
  cuda_reclaim/cuda_reclaim.h (as installed)               ```c blocks inside its first comment (" * ")
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

DOC = "docs/c-api.md"
INCLUDE_TREE = "bindings/cuda_reclaim/include"
HEADER = os.path.join(INCLUDE_TREE, "cuda_reclaim", "cuda_reclaim.h")
FENCE = re.compile(r"^```(\w*)\s*$")


def fenced_blocks(lines, where):
    """(language, first line number, code) of each fenced block in `lines`."""
    blocks, language, start, code = [], None, 0, []
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, code = fence.group(1) or "text", number + 1, []
        elif fence:
            blocks.append((language, f"{where}:{start}", "\n".join(code) + "\n"))
            language = None
        elif language is not None:
            code.append(line)
    if language is not None:
        sys.exit(f"{where}:{start}: a fenced block is never closed")
    return blocks


def doc_blocks():
    with open(DOC, encoding="utf-8") as doc:
        return fenced_blocks(doc.read().splitlines(), DOC)


def header_blocks():
    with open(HEADER, encoding="utf-8") as header:
        text = header.read()
    comment = text[text.index("/*"):text.index("*/")]
    # The comment's lines are " * code"; an empty one is " *".
    lines = [re.sub(r"^ \* ?", "", line) for line in comment.splitlines()[1:]]
    return fenced_blocks(lines, HEADER)


def python_includes(configured):
    paths = sysconfig.get_paths()
    found = [configured, paths["include"], paths["platinclude"]]
    return [path for index, path in enumerate(found) if path and path not in found[:index]]


def compile_block(compiler, language, code, includes, where):
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "example." + ("c" if language == "c" else "cc"))
        with open(source, "w", encoding="utf-8") as out:
            out.write(code)
        standard = ["-std=c11"] if language == "c" else ["-std=c++17"]
        command = [compiler, *standard, "-fsyntax-only", "-Wall", "-Werror"]
        command += [f"-I{path}" for path in includes] + [source]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"FAIL {where} as {language} ({os.path.basename(compiler)}):\n{result.stderr}")
        return False
    print(f"ok   {where} as {language} ({os.path.basename(compiler)})")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python-include", required=True, help="@python_headers' PYTHON_INCLUDE_DIR")
    args = parser.parse_args()
    gcc, gxx = shutil.which("gcc"), shutil.which("g++")
    if gcc is None or gxx is None:
        sys.exit("compile_examples: gcc and g++ must be on PATH")
    python = python_includes(args.python_include)
    installed = [os.path.abspath(INCLUDE_TREE)] + python
    source_tree = [os.path.abspath("."), os.path.abspath("include")] + python

    blocks = doc_blocks() + header_blocks()
    c_blocks = [block for block in blocks if block[0] == "c"]
    cpp_blocks = [block for block in blocks if block[0] == "cpp"]
    if not any(where.startswith(DOC) for _, where, _ in c_blocks) or not any(
        where.startswith(HEADER) for _, where, _ in c_blocks
    ):
        sys.exit("compile_examples: expected a ```c example in both " + DOC + " and " + HEADER)

    ok = True
    for _, where, code in c_blocks:
        ok &= compile_block(gcc, "c", code, installed, where)
        ok &= compile_block(gxx, "c++", code, installed, where)
    for _, where, code in cpp_blocks:
        ok &= compile_block(gxx, "c++", code, source_tree, where)
    print(f"{len(c_blocks)} C and {len(cpp_blocks)} C++ examples")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
