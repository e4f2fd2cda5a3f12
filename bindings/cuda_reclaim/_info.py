"""``python -m cuda_reclaim [info] [--json] [--version]`` and :func:`cuda_reclaim.show_config`: what a bug
report needs, read only (no drain thread starts, no counter moves, no GPU library is imported; the driver is
loaded and initialized with cuInit to list its devices, which creates no context); every section catches its
own errors and reports them.

A ``CUDA_RECLAIM_*`` value that is not understood makes ``import cuda_reclaim`` fail with an ImportError in
a program; ``python -m cuda_reclaim`` imports the package past it (its default stands in) and this report
shows it in its ``settings`` section, one line each: the variable, its value and what is accepted."""

import argparse
import json
import os
import platform
import sys
import sysconfig

# Distributions whose versions are reported, never imported (importing them can initialize CUDA).
_OTHER_DISTRIBUTIONS = (
    "cuda-core",
    "cuda-bindings",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "cupy",
    "torch",
    "numba-cuda",
)


def _package():
    import cuda_reclaim

    return {
        "version": cuda_reclaim.__version__,
        "abi_version": cuda_reclaim.ABI_VERSION,
        "location": os.path.dirname(os.path.abspath(cuda_reclaim.__file__)),
        "build": _build(cuda_reclaim.__file__),
    }


def _build(package_file):
    from importlib import metadata

    try:
        dist = metadata.distribution("cuda-reclaim")
    except metadata.PackageNotFoundError:
        return "source tree"
    # An installed distribution that is not the imported package (a source tree on sys.path) says nothing.
    installed = os.path.abspath(str(dist.locate_file(os.path.join("cuda_reclaim", "__init__.py"))))
    if installed != os.path.abspath(package_file):
        return "source tree"
    wheel = dist.read_text("WHEEL")
    tags = [line.split(":", 1)[1].strip() for line in (wheel or "").splitlines() if line.startswith("Tag:")]
    return "wheel " + ", ".join(tags) if tags else "installed (no wheel tag)"


def _python():
    return {
        "version": sys.version,
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "Py_GIL_DISABLED": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "Py_DEBUG": bool(sysconfig.get_config_var("Py_DEBUG")),
    }


def _platform():
    libc, libc_version = platform.libc_ver()
    return {"platform": platform.platform(), "machine": platform.machine(), "libc": f"{libc} {libc_version}".strip()}


def _auto_drain():
    import cuda_reclaim

    return {"mode": cuda_reclaim.get_auto_drain()}


def _readable(value):
    """An environment value as text: bytes that are not UTF-8 (os.environ holds them as surrogates) as \\xNN."""
    return os.fsencode(value).decode("utf-8", "backslashreplace")


def _environment():
    return {
        name: _readable(value) for name, value in sorted(os.environ.items()) if name.startswith("CUDA_RECLAIM_")
    }


def _settings():
    """The settings read at import whose values are not understood: {variable: what is wrong}."""
    from . import _reclaim

    return {
        variable: f"{value!r} is not understood (import cuda_reclaim fails with ImportError): expected {accepted}"
        for variable, value, accepted in _reclaim._bad_settings
    }


def _driver():
    from . import _reclaim

    info = dict(_reclaim._driver_info())
    # cuDriverGetVersion's 13000 is CUDA 13.0 (1000 * major + 10 * minor); 0: the driver did not say.
    version = info["version"]
    info["version"] = f"{version // 1000}.{version % 1000 // 10}" if version > 0 else "unknown"
    info["library"] = _readable(os.environ.get("CUDA_RECLAIM_LIBCUDA") or "libcuda.so.1")
    # Always a list, with why it is empty when the driver could not be asked (no driver, cuInit failed, ...).
    try:
        info["devices"] = _reclaim._driver_devices()
        info["devices_error"] = None
    except _reclaim.DriverError as error:
        info["devices"] = []
        info["devices_error"] = str(error)
    return info


def _device_lines(values):
    """The text lines of the driver section's devices: a count and one line each, or none and why."""
    devices = values["devices"]
    if not devices:
        why = values.get("devices_error")
        return ["  devices: none" + (f" ({why})" if why else "")]
    lines = [f"  devices: {len(devices)}"]
    for device in devices:
        memory = device["total_memory"] / 2**30
        lines.append(
            f"    {device['ordinal']}: {device['name']} (compute capability {device['compute_capability']},"
            f" {memory:.1f} GiB)"
        )
    return lines


def _libraries():
    from importlib import metadata

    versions = {}
    for name in _OTHER_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _stats():
    import cuda_reclaim

    return cuda_reclaim.stats()


_SECTIONS = (
    ("cuda_reclaim", _package),
    ("python", _python),
    ("platform", _platform),
    ("auto_drain", _auto_drain),
    ("environment", _environment),
    ("settings", _settings),
    ("driver", _driver),
    ("libraries", _libraries),
    ("stats", _stats),
)


def collect():
    """Return the report as a dict of sections; a section that failed holds ``{"error": "..."}``."""
    report = {}
    for name, section in _SECTIONS:
        try:
            report[name] = section()
        except Exception as error:  # one broken section must not hide the others
            report[name] = {"error": f"{type(error).__name__}: {error}"}
    return report


def format_text(report):
    """The report as aligned ``key: value`` lines under one heading per section."""
    lines = []
    for section, values in report.items():
        lines.append(f"{section}:")
        if not values:
            lines.append("  all understood" if section == "settings" else "  (none)")
        for key, value in values.items():
            if section == "driver" and key == "devices" and isinstance(value, list):
                lines.extend(_device_lines(values))
                continue
            if section == "driver" and key == "devices_error":
                continue  # said on the devices line
            shown = "not installed" if value is None else str(value).replace("\n", " ")
            lines.append(f"  {key}: {shown}")
    return "\n".join(lines) + "\n"


def show(file=None, *, as_json=False):
    """Write the report to `file` (default: sys.stdout) as text, or as JSON."""
    report = collect()
    text = json.dumps(report, indent=2, sort_keys=False) + "\n" if as_json else format_text(report)
    (sys.stdout if file is None else file).write(text)


def main(argv=None):
    """``python -m cuda_reclaim [info] [--json] [--version]``: print the report (``info``, the one command, may
    be left out) or the version; returns the exit status (0; 2 for a usage error, from argparse)."""
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="python -m cuda_reclaim",
        description="Print what a bug report needs: versions, build, settings, CUDA driver and devices, counters.",
    )
    parser.add_argument("command", nargs="?", choices=["info"], help="info: the report (the default)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--version", action="version", version=f"cuda_reclaim {__version__}")
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # a device name the terminal cannot show
    show(as_json=args.json)
    return 0
