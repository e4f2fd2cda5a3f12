"""Build the cuda-reclaim wheel offline (a wheel is a zip with METADATA, WHEEL and RECORD).

Run by //bindings:wheel with the interpreter the wheel is for. Deterministic: fixed timestamps, sorted
entries, so the same inputs give the same bytes.
"""

import argparse
import base64
import hashlib
import os
import zipfile

SUMMARY = "Release Python objects safely from CUDA's own threads (graph user objects, host functions)."
EPOCH = (1980, 1, 1, 0, 0, 0)


def archive_name(path, root):
    """bindings/cuda_reclaim/x.py or bazel-out/.../bin/bindings/cuda_reclaim/x.so -> cuda_reclaim/x..."""
    marker = "/" + root + "/"
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    if marker in path:
        return path.split(marker, 1)[1]
    raise SystemExit(f"build_wheel: {path} is not under {root}/")


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--tag", required=True, help="e.g. cp312-cp312-linux_x86_64")
    parser.add_argument("--extension", action="append", default=[], help="SRC=DEST renames a built module")
    parser.add_argument("--package-root", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    entries = {}
    renamed = dict(item.split("=", 1) for item in args.extension)
    for path in args.files:
        if path in renamed:
            continue
        entries[archive_name(path, args.package_root)] = path
    for source, dest in renamed.items():
        entries[dest] = source

    dist_info = f"cuda_reclaim-{args.version}.dist-info"
    python_tag = args.tag.split("-")[0]
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: cuda-reclaim",
            f"Version: {args.version}",
            f"Summary: {SUMMARY}",
            f"Requires-Python: =={python_tag[2]}.{python_tag[3:]}.*",
            "License: Apache-2.0",
            "",
        ]
    )
    wheel = "\n".join(
        [
            "Wheel-Version: 1.0",
            "Generator: cuda-reclaim build_wheel.py",
            "Root-Is-Purelib: false",
            f"Tag: {args.tag}",
            "",
        ]
    )
    generated = {
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": wheel.encode(),
        f"{dist_info}/top_level.txt": b"_cuda_reclaim_pytest\ncuda_reclaim\n",
        # The pytest plugin (pyproject.toml's [project.entry-points.pytest11]).
        f"{dist_info}/entry_points.txt": (
            b"[pytest11]\ncuda_reclaim = _cuda_reclaim_pytest\n"
            b"cuda_reclaim_marker = _cuda_reclaim_pytest:marker_plugin\n"
        ),
    }

    record = []
    with zipfile.ZipFile(args.output, "w", zipfile.ZIP_DEFLATED) as archive:

        def add(name, data, executable=False):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
            record.append(f"{name},{record_hash(data)},{len(data)}")

        for name in sorted(entries):
            with open(entries[name], "rb") as f:
                add(name, f.read(), executable=name.endswith(".so"))
        for name in sorted(generated):
            add(name, generated[name])
        record_name = f"{dist_info}/RECORD"
        record.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=EPOCH)
        info.external_attr = 0o644 << 16
        archive.writestr(info, "\n".join(record) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    os.chmod(args.output, 0o644)


if __name__ == "__main__":
    main()
