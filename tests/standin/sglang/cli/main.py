"""Stand-in for `sglang.cli.main:main`, the `sglang` console script: `sglang serve ARGS`."""
import sys

import standin_serve


def main():
    argv = sys.argv[1:]
    if argv[:1] != ["serve"]:
        standin_serve.fail("expected `sglang serve ...`, got %r" % argv)
    standin_serve.main_sglang(argv[1:])
