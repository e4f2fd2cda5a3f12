"""The shutdown comparison's sigint scenario, run by a caller that ignores SIGINT and SIGQUIT (`nohup ... &`,
a CI runner): the children must still end by SIGINT, so R stays clean. Exit status 0 when it does."""

import signal
import sys

import torture

# Inherited by every child across exec, as a caller's SIG_IGN is.
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGQUIT, signal.SIG_IGN)

sys.exit(torture.main(["--strategies=R", "--scenarios=sigint", "--runs=0", "--runs-r=3", "--workers=1",
                       "--require-clean=R", "--no-progress", *sys.argv[1:]]))
