"""``python -m cuda_reclaim [info] [--json] [--version]``: print what a bug report needs (``info``, the one
command, is the default), as :func:`cuda_reclaim.show_config` does, or the version."""

import sys


def main(argv=None):
    from . import _info

    return _info.main(argv)


if __name__ == "__main__":
    sys.exit(main())
