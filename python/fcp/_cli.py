"""What fcp's Python commands share with the C++ CLI's conventions."""

import argparse
import sys


class HelpWithDefaults(argparse.HelpFormatter):
    """--help shows each option's default, as the C++ CLI's does: appended
    where the option has a value by default and its help does not already
    say it (an option without one says in its help what happens then)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags: one `error:` line and exit status 2, like the C++ CLI; --help
    with the defaults (HelpWithDefaults)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpWithDefaults)
        super().__init__(*args, **kwargs)

    def error(self, message):
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)
