#!/bin/sh
# Stub for @remote_coverage_tools: the real Java coverage tools are not
# available offline. Coverage merging / report generation is a no-op.
echo "remote_coverage_tools stub ($0): coverage report generation is disabled offline" >&2
exit 0
