"""What fcp's Python commands share with the C++ CLI's conventions."""

import argparse
import sys


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags: one `error:` line and exit status 2, like the C++ CLI."""

    def error(self, message):
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)
