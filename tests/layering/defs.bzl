"""`dependency_refused_test`: passes when Bazel refuses to analyse a target because of one dependency.

Bazel has no built-in test that a build fails. This one analyses `probe` in a configuration that turns
analysis errors into data (--allow_analysis_failures, as an analysis test may) and passes only when the
errors name `dependency` as not visible from `probe`: a refusal for any other reason fails the test. The
probe is tagged "manual", so `bazel build //...` never builds it.
"""

def _dependency_refused_test_impl(ctx):
    probe = ctx.attr.probe[0]
    expected = "target '%s' is not visible from target '%s'" % (ctx.attr.dependency, probe.label)
    if AnalysisFailureInfo not in probe:
        return [AnalysisTestResultInfo(success = False, message = "%s was analysed without an error; expected: %s" % (
            probe.label,
            expected,
        ))]
    messages = [cause.message for cause in probe[AnalysisFailureInfo].causes.to_list()]
    refused = [message for message in messages if expected in message]
    return [AnalysisTestResultInfo(
        success = bool(refused),
        message = "\n".join(refused or (["expected: " + expected, "got:"] + messages)),
    )]

_analysis_failures_as_data = analysis_test_transition(
    settings = {"//command_line_option:allow_analysis_failures": "True"},
)

dependency_refused_test = rule(
    implementation = _dependency_refused_test_impl,
    attrs = {
        "probe": attr.label(cfg = _analysis_failures_as_data, doc = "a target with one forbidden dependency"),
        "dependency": attr.string(doc = "that dependency's label, as Bazel prints it"),
    },
    analysis_test = True,
)
