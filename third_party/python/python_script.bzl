"""`python_script` and `python_script_test`: run a Python program with the configured interpreter.

The interpreter is @python_headers//:python_bin (the one selected by --repo_env=PYTHON_BIN_PATH). The
generated launcher finds its runfiles tree the same way under `bazel run`, `bazel test`, as a data
dependency of another target, and when run directly from bazel-bin/, puts the `pythonpath` folders (paths
from the workspace root, inside the runfiles tree) on PYTHONPATH and execs the program with its arguments.

    python_script(
        name = "shutdown_demo",
        main = "shutdown_demo.py",          # or module = "pytest"
        pythonpath = ["bindings", "bench/shutdown"],
        data = ["//bench/shutdown:harness"],
    )
"""

def _runfiles_path(ctx, file):
    # short_path is "../<repository>/<path>" for external files, "<path>" for this workspace's.
    if file.short_path.startswith("../"):
        return file.short_path[len("../"):]
    return ctx.workspace_name + "/" + file.short_path

def _python_script_impl(ctx):
    if bool(ctx.file.main) == bool(ctx.attr.module):
        fail("give exactly one of `main` and `module`")
    if ctx.file.main:
        program = '"${runfiles}/%s"' % _runfiles_path(ctx, ctx.file.main)
    else:
        program = "-m " + ctx.attr.module
    pythonpath = ":".join(['${runfiles}/%s/%s' % (ctx.workspace_name, folder) for folder in ctx.attr.pythonpath])
    launcher = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.expand_template(
        template = ctx.file._template,
        output = launcher,
        substitutions = {
            "%{label}": str(ctx.label),
            "%{python}": _runfiles_path(ctx, ctx.file._python),
            "%{pythonpath}": pythonpath,
            "%{program}": program,
        },
        is_executable = True,
    )
    files = [ctx.file._python] + ([ctx.file.main] if ctx.file.main else []) + ctx.files.data
    runfiles = ctx.runfiles(files = files)
    for target in ctx.attr.data:
        runfiles = runfiles.merge(target[DefaultInfo].default_runfiles)
    return [DefaultInfo(executable = launcher, runfiles = runfiles)]

_ATTRS = {
    "main": attr.label(allow_single_file = [".py"], doc = "the program to run"),
    "module": attr.string(doc = "or a module to run with -m"),
    "pythonpath": attr.string_list(doc = "folders, from the workspace root, to put on PYTHONPATH"),
    "data": attr.label_list(allow_files = True, doc = "files and targets the program needs at run time"),
    "_python": attr.label(default = "@python_headers//:python_bin", allow_single_file = True),
    "_template": attr.label(default = "//third_party/python:python_script.sh.tpl", allow_single_file = True),
}

python_script = rule(implementation = _python_script_impl, attrs = _ATTRS, executable = True)

python_script_test = rule(implementation = _python_script_impl, attrs = _ATTRS, test = True)
