"""How the scenario programs of children/ run: `python children/FILE.py NAME [ARG...]` calls the scenario
function NAME of FILE with the remaining arguments (as strings)."""

import sys


def run(*scenarios):
    """Runs the scenario that sys.argv[1] names, among `scenarios` (functions), with sys.argv[2:]."""
    by_name = {scenario.__name__: scenario for scenario in scenarios}
    if len(sys.argv) < 2 or sys.argv[1] not in by_name:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(by_name)}}} [ARG...]")
    by_name[sys.argv[1]](*sys.argv[2:])
