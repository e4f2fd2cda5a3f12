"""Writes the results table of docs/clients.md from run_clients.py's clients.json.

    python make_table.py clients.json                    # print the table (Markdown)
    python make_table.py clients.json --write docs/clients.md

With --write, the text between the lines ``<!-- clients-results:begin -->`` and ``<!-- clients-results:end -->``
of that file is replaced by the table; the rest of the file is left as it is.
"""

import argparse
import json
import re
import sys

BEGIN = "<!-- clients-results:begin -->"
END = "<!-- clients-results:end -->"
COLUMNS = {"upstream": "upstream", "idle": "cuda-reclaim, main thread idle", "busy": "cuda-reclaim, main thread busy"}
VERSIONS = ("python", "numba_cuda", "cupy", "cuda.core", "cuda.bindings", "cuda_reclaim")


def _cell(entry):
    if not entry:
        return "–"
    outcome = entry["outcome"]
    message = " ".join(entry.get("message", "").split())
    if outcome == "passed" or not message:
        return outcome
    if len(message) > 90:
        message = message[:87] + "..."
    return f"{outcome}: `{message.replace('`', chr(39))}`".replace("|", "\\|")


def table(results):
    """The Markdown table (and a versions line) of a clients.json."""
    modes = [mode for mode in COLUMNS if mode in results["modes"]]
    lines = [
        "| peer | test | " + " | ".join(COLUMNS[mode] for mode in modes) + " |",
        "|---|---|" + "---|" * len(modes),
    ]
    for peer, tests in results["peers"].items():
        for name, by_mode in tests.items():
            cells = " | ".join(_cell(by_mode.get(mode)) for mode in modes)
            lines.append(f"| {peer} | `{name}` | {cells} |")
    versions = results.get("versions", {})
    found = [f"{name} {versions[name]}" for name in VERSIONS if name in versions]
    if found:
        lines += ["", "Versions: " + ", ".join(found) + "."]
    return "\n".join(lines) + "\n"


def write_into(path, text):
    with open(path) as f:
        document = f.read()
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.DOTALL)
    if not pattern.search(document):
        raise SystemExit(f"make_table.py: {path} has no {BEGIN} ... {END} section")
    with open(path, "w") as f:
        f.write(pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", document, count=1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="run_clients.py's clients.json")
    parser.add_argument("--write", metavar="MARKDOWN", help="replace the results section of this file")
    options = parser.parse_args(argv)
    with open(options.results) as f:
        text = table(json.load(f))
    if options.write:
        write_into(options.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
