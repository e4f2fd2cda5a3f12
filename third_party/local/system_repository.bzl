"""`system_repository`: a local directory as an external repository, its path overridable.

The path is the environment variable `env` (`--repo_env=NAME=/path`, or the shell's environment), or
`default`, the path of the Debian package that provides it (third_party/install_deps.sh). With
`build_file` the directory gets that BUILD file (as new_local_repository); without it the directory must
be a Bazel repository already (as local_repository). Bazel refetches when any of the variables changes.
"""

# Every variable any instance reads: repository_rule() takes one static list.
ENVIRONMENT = [
    "CUDA_RECLAIM_BENCHMARK_DIR",
    "CUDA_RECLAIM_CONCURRENTQUEUE_DIR",
    "CUDA_RECLAIM_GOOGLETEST_DIR",
    "CUDA_RECLAIM_RULES_JAVA_DIR",
]

def _system_repository_impl(ctx):
    if ctx.attr.env not in ENVIRONMENT:
        fail("system_repository: %s is not in ENVIRONMENT, so Bazel would not refetch when it changes" %
             ctx.attr.env)
    root = ctx.os.environ.get(ctx.attr.env, "").strip() or ctx.attr.default
    directory = ctx.path(root)
    if not directory.exists:
        fail(("@%s: %s does not exist. Install it (bash third_party/install_deps.sh) or point " +
              "--repo_env=%s at its directory.") % (ctx.name, root, ctx.attr.env))

    # What new_local_repository does: link each entry, then lay the BUILD file over them.
    replaced = ["BUILD", "BUILD.bazel", "WORKSPACE", "WORKSPACE.bazel"] if ctx.attr.build_file else []
    for entry in directory.readdir():
        if entry.basename not in replaced:
            ctx.symlink(entry, entry.basename)
    if ctx.attr.build_file:
        ctx.symlink(ctx.attr.build_file, "BUILD.bazel")
        ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

system_repository = repository_rule(
    implementation = _system_repository_impl,
    local = True,
    environ = ENVIRONMENT,
    attrs = {
        "env": attr.string(mandatory = True, doc = "the variable that overrides the path"),
        "default": attr.string(mandatory = True, doc = "the Debian package's path"),
        "build_file": attr.label(allow_single_file = True, doc = "BUILD file for a plain directory"),
    },
)
