#!/usr/bin/env bash
# CPython 3.14 from Debian's packages: kept as a name of its own because the docs of the 3.14 runs cite it.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install_python.sh" 14 "$@"
