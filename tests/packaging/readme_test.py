"""The README does what it says, for a user's first hour: its install lines, run exactly as written in a fresh
venv (made with the interpreter's venv module) inside a copy of the checkout, install the package without Bazel
or a CUDA toolkit; its example then runs against the fake driver (tests/graph/fake_libcuda.cc) and prints what
its comments promise; its `python -m cuda_reclaim` line runs. Also: the README has no relative link (it is the
package's long description, shown on an index page where such links break), and its contributors' section has
exactly the two commands that CI runs one of (.ci/run).

No `bazel` is on PATH and no CUDA_PATH or CUDA_HOME is set while it runs. The install needs PyPI (pip's isolated build fetches setuptools and nvidia-cuda-runtime), so this is not a Bazel
test: tests/packaging/manylinux_wheel_test.sh runs it, on one interpreter.
Usage, from the repository root: python3 tests/packaging/readme_test.py PYTHON FAKE_LIBCUDA_SO
    (without arguments: the checks of the README's text alone)
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = None  # the interpreter whose venv module makes the venv (command line)
FAKE_LIBCUDA = None  # the fake driver (command line)
INSTALL_LIMIT = 900  # seconds: a stuck download or build must not hang CI
RUN_LIMIT = 120

# What the example's comments say it prints.
EXPECTED_OUTPUT = ["6", "True", "0"]

# The example's own names, from the fake driver: a graph, a stream, an object to keep alive, and the call that
# destroys the graph (as cuda.core's close() or cuGraphDestroy would). The fake runs stream work on a thread of
# its own, as CUDA does.
PRELUDE = """
import ctypes
_fake = ctypes.CDLL({fake!r})
_fake.fake_cuda_graph_create.restype = ctypes.c_void_p
_fake.fake_cuda_graph_destroy.argtypes = [ctypes.c_void_p]
_fake.fake_cuda_start_threads.argtypes = [ctypes.c_int]
_fake.fake_cuda_start_threads(1)
graph = _fake.fake_cuda_graph_create()
stream = 0x5EA
weights = bytearray(1 << 20)
def destroy_graph(graph):
    _fake.fake_cuda_graph_destroy(graph)
"""


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The body of the README's `## title` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not match:
        raise AssertionError(f"README.md has no section '## {title}'")
    return match.group(1)


def code_blocks(text, language):
    """The fenced code blocks of `language` in `text`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def commands(block):
    """The shell commands of a block: each line without its comment."""
    lines = (line.split("#", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line]


def relative_links(text):
    """Markdown link targets that are not absolute URLs."""
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+://", target)]


def path_without_bazel(path, shadow_root):
    """`path` with each folder that holds a `bazel` replaced by a folder of links to everything else it holds:
    the install must not need Bazel."""
    folders = []
    for number, folder in enumerate(path.split(os.pathsep)):
        if folder and os.path.exists(os.path.join(folder, "bazel")):
            shadow = os.path.join(shadow_root, str(number))
            os.makedirs(shadow)
            for entry in os.listdir(folder):
                if not entry.startswith("bazel"):
                    os.symlink(os.path.join(folder, entry), os.path.join(shadow, entry))
            folder = shadow
        folders.append(folder)
    return os.pathsep.join(folders)


def checkout_files():
    """The files of the checkout, as git lists them (tracked, and untracked ones it does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    return [path for path in listed if path and os.path.isfile(os.path.join(ROOT, path))]


class TextTest(unittest.TestCase):
    """The README's text."""

    def test_no_relative_links_in_the_long_description(self):
        self.assertEqual(relative_links(readme()), [])
        self.assertEqual(relative_links("[a](docs/a.md) [b](https://example.com/b) [c](#c)"), ["docs/a.md", "#c"])

    def test_install_is_one_pip_command_and_the_example_shows_the_promised_names(self):
        text = readme()
        self.assertEqual(commands(code_blocks(section(text, "Install"), "sh")[0]), ["python -m pip install ."])
        example = code_blocks(section(text, "Use"), "python")[0]
        self.assertLessEqual(len(example.splitlines()), 10)
        for name in ("keep_alive(", "attachment.wait(", "launch_host_func(", "future.result(", "flush("):
            self.assertIn(name, example)
        self.assertEqual([c.split()[:3] for c in commands(code_blocks(section(text, "Use"), "sh")[0])],
                         [["python", "-m", "cuda_reclaim"]])

    def test_the_contributors_have_exactly_two_commands_and_ci_runs_the_tests(self):
        block = code_blocks(section(readme(), "For contributors"), "sh")
        self.assertEqual(len(block), 1)
        self.assertEqual(commands(block[0]), ["bash examples/run_demo.sh", "bash tests/run_all.sh"])
        with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
            self.assertIn("bash tests/run_all.sh", f.read())


def make_venv_with_pip(venv):
    """A fresh venv with pip in it, as `python -m venv` makes one. An interpreter without ensurepip (Debian's
    splits it out) makes the venv without pip and installs pip into it with its own pip, from PyPI."""
    if subprocess.run([PYTHON, "-c", "import ensurepip"], capture_output=True).returncode == 0:
        subprocess.run([PYTHON, "-m", "venv", venv], check=True, timeout=RUN_LIMIT)
        return
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", venv], check=True, timeout=RUN_LIMIT)
    subprocess.run([PYTHON, "-m", "pip", "--python", os.path.join(venv, "bin", "python"), "install", "--quiet",
                    "pip"], check=True, timeout=INSTALL_LIMIT)


@unittest.skipIf(len(sys.argv) != 3, "the install runs with PYTHON and FAKE_LIBCUDA_SO given")
class InstallTest(unittest.TestCase):
    """The README's install lines, example and command, in a fresh venv; setUpClass installs once."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="readme-test-")
        cls.checkout = os.path.join(cls.tmp, "checkout")
        for path in checkout_files():
            os.makedirs(os.path.dirname(os.path.join(cls.checkout, path)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(cls.checkout, path))
        venv = os.path.join(cls.tmp, "venv")
        make_venv_with_pip(venv)
        # As in a shell where the venv is active: its python first on PATH; no Bazel on PATH, no CUDA toolkit.
        cls.env = {key: value for key, value in os.environ.items()
                   if key not in ("CUDA_PATH", "CUDA_HOME", "PYTHONPATH", "PYTHONHOME")}
        path = path_without_bazel(cls.env.get("PATH", ""), os.path.join(cls.tmp, "path"))
        cls.env.update(PATH=os.path.join(venv, "bin") + os.pathsep + path, VIRTUAL_ENV=venv,
                       PIP_DISABLE_PIP_VERSION_CHECK="1")
        if shutil.which("bazel", path=cls.env["PATH"]):
            raise AssertionError(f"bazel is still on PATH: {shutil.which('bazel', path=cls.env['PATH'])}")
        cls.python = os.path.join(venv, "bin", "python")
        cls.install_log = []
        for command in commands(code_blocks(section(readme(), "Install"), "sh")[0]):
            result = subprocess.run(command, shell=True, cwd=cls.checkout, env=cls.env, capture_output=True,
                                    text=True, timeout=INSTALL_LIMIT)
            cls.install_log.append((command, result))
            if result.returncode != 0:
                raise AssertionError(f"the README's `{command}` failed:\n{result.stdout}\n{result.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_in_venv(self, args, shell=False, **extra_env):
        # Not from the checkout: the installed package, never the source tree.
        return subprocess.run(args, shell=shell, cwd=self.tmp, env={**self.env, **extra_env}, capture_output=True,
                              text=True, timeout=RUN_LIMIT)

    def test_the_package_is_installed_in_the_venv_from_the_copy(self):
        result = self.run_in_venv([self.python, "-c", "import cuda_reclaim, sys; print(cuda_reclaim.__file__)"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.strip().startswith(os.path.join(self.tmp, "venv")), result.stdout)

    def test_the_example_prints_what_its_comments_say(self):
        example = code_blocks(section(readme(), "Use"), "python")[0]
        script = os.path.join(self.tmp, "example.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(PRELUDE.format(fake=FAKE_LIBCUDA) + example)
        result = self.run_in_venv([self.python, script], CUDA_RECLAIM_LIBCUDA=FAKE_LIBCUDA)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout.split(), EXPECTED_OUTPUT, result.stderr)

    def test_the_command_prints_the_report_with_the_driver(self):
        for command in commands(code_blocks(section(readme(), "Use"), "sh")[0]):
            result = self.run_in_venv(command, shell=True, CUDA_RECLAIM_LIBCUDA=FAKE_LIBCUDA)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("Fake CUDA Device 0", result.stdout)  # the driver's device, as the fake names it


if __name__ == "__main__":
    if len(sys.argv) == 3:
        PYTHON, FAKE_LIBCUDA = sys.argv[1], os.path.abspath(sys.argv[2])
        if not os.path.isfile(FAKE_LIBCUDA):
            sys.exit(f"readme_test.py: no fake driver at {FAKE_LIBCUDA}")
    elif len(sys.argv) != 1:
        sys.exit(__doc__)
    unittest.main(argv=sys.argv[:1], verbosity=2)
