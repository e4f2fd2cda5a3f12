"""bindings/build_wheels.sh prints `auditwheel show`'s report with its advice to "recompile ... on a system with
earlier versions of these libraries" replaced by what is true of these wheels: built against the chosen glibc
on purpose, and tagged for it by `auditwheel repair --plat`. The script's own function runs on a report."""

import os
import subprocess

import pytest


def build_wheels_script():
    """The script: in the runfiles where it is there, else beside the source tree this file comes from."""
    for root in (os.getcwd(), os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))):
        path = os.path.join(root, "bindings", "build_wheels.sh")
        if os.path.isfile(path):
            return path
    pytest.skip("bindings/build_wheels.sh is not in this tree")


# What auditwheel show prints for a wheel built against glibc 2.28 (its paragraphs, wrapped at 70 columns).
REPORT = """
cuda_reclaim-0.1.0-cp312-cp312-linux_x86_64.whl is consistent with the
following platform tag: "manylinux_2_28_x86_64".

The wheel references external versioned symbols in these system-
provided shared libraries: libc.so.6 with versions {'GLIBC_2.28'}

This constrains the platform tag to "manylinux_2_28_x86_64". In order
to achieve a more compatible tag, you would need to recompile a new
wheel from source on a system with earlier versions of these
libraries, such as a recent manylinux image.
"""


def explain(report, glibc="2.28"):
    script = build_wheels_script()
    command = f'source <(sed -n "/^explain_show() {{/,/^}}/p" "{script}"); explain_show {glibc}'
    result = subprocess.run(["bash", "-c", command], input=report, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_recompile_advice_is_replaced_by_what_the_build_does():
    shown = explain(REPORT)
    assert "recompile" not in shown
    words = " ".join(shown.split())
    assert words.startswith('cuda_reclaim-0.1.0-cp312-cp312-linux_x86_64.whl is consistent with the following')
    assert "libc.so.6 with versions {'GLIBC_2.28'}" in words
    assert words.endswith(
        'constrain the platform tag to "manylinux_2_28_x86_64": it is built against glibc 2.28 on purpose, and '
        "tagged for it next (auditwheel repair --plat)."
    )


def test_a_report_without_the_advice_is_printed_as_it_is():
    report = REPORT.split("\n\nThis constrains")[0] + "\n"
    assert explain(report) == report


def test_build_wheels_pipes_auditwheel_show_through_it():
    with open(build_wheels_script(), encoding="utf-8") as script:
        lines = [line.strip() for line in script if "auditwheel show" in line and not line.lstrip().startswith("#")]
    assert lines == ['auditwheel show "${built}" | explain_show "${glibc}"']
