"""``python -m cuda_reclaim COMMAND``: ``info [--json]`` prints what a bug report needs."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cuda_reclaim")
    parser.add_argument("command", choices=["info"], help="info: versions, build, driver, counters")
    args, rest = parser.parse_known_args(argv)
    from . import _info

    return _info.main(rest)


if __name__ == "__main__":
    sys.exit(main())
