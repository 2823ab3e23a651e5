#!/usr/bin/env python3
"""SGLang's own command-line parser, as a test oracle for the SGLang lines spark-launch plans.

    python3 -I -S tests/standin/sglang_parse.py SITE < lines.jsonl

SITE is the folder tests/standin/fetch-sglang-wheels prints (the pinned SGLang wheel and the two
packages its parser needs, installed without dependencies). Each input line is a JSON array:
one engine command line, program first (`python3 -m sglang.launch_server ...`,
`sglang serve ...`) or its arguments alone. The first output line describes the parser
({"sglang": VERSION, "flags": N, "stand_ins": [...]}); then one verdict per input line:
{"ok": true} or {"ok": false, "error": "..."} with argparse's own message. An input line that is
a JSON object {"resolve": WORD} asks instead which flag the parser reads the flag word WORD as:
{"options": [every spelling of that flag]}, {"options": null} for none, or {"ambiguous": "..."}
with argparse's message.

The parser is built as SGLang builds it in `prepare_server_args`: `argparse.ArgumentParser()`,
then `ServerArgs.add_cli_args(parser)`, then `parser.parse_args(args)`. `from_cli_args` and the
server's start-up checks (GPU memory, platform) are not run: they need the engine's runtime.

SGLang's package imports its runtime at module level (torch, triton, transformers, numpy, ...;
gigabytes with CUDA). Those are not installed. A module that SGLang's own code imports and that
is not installed gets an inert stand-in: a module whose attributes are subclassable classes and
whose calls return inert values, so module-level code (class definitions, decorators, constant
tables) runs and the argument definitions, which are SGLang's code and data, come out as
released. Availability probes (`importlib.util.find_spec`) and third-party libraries' own
optional imports still see the module as missing. The stand-ins are listed in the first output
line. `sglang/__init__.py` (which patches transformers at import) is not run.
"""

import abc
import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import types

STANDS_IN = set()
# Accelerator back-ends probed with `hasattr(torch, name)`: absent, as on a CPU-only torch.
ABSENT_ATTRS = {"npu", "hpu", "xpu", "musa", "mlu"}
TORCH_VERSION = "2.9.1"


def _probing():
    """True inside importlib.util.find_spec: an availability check sees a missing module."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "find_spec" and f.f_globals.get("__name__") == "importlib.util":
            return True
        f = f.f_back
    return False


def _imported_by_sglang():
    """True when the import statement runs in SGLang's own code."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if not name.startswith(("importlib", "_frozen_importlib")) and name != __name__:
            return name == "sglang" or name.startswith("sglang.")
        f = f.f_back
    return False


class _Meta(abc.ABCMeta):
    """The type of stand-in classes: any attribute is another class, calls return a value."""

    def __new__(mcs, name, bases, ns, **kw):
        return super().__new__(mcs, name, bases, ns)

    def __init__(cls, name, bases, ns, **kw):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _cls(name)

    def __call__(cls, *a, **k):
        if len(a) == 1 and not k and isinstance(a[0], types.FunctionType):
            return a[0]  # used as a decorator
        return _Value()

    def register(cls, *a, **k):
        return a[0] if a else cls

    def __getitem__(cls, item):
        return _cls("item")

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0

    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    def __index__(cls):
        return 0

    def __float__(cls):
        return 0.0

    def __hash__(cls):
        return id(cls)

    def __contains__(cls, k):
        return False

    def __setitem__(cls, k, v):
        pass

    def __delitem__(cls, k):
        pass

    def __enter__(cls):
        return cls

    def __exit__(cls, *a):
        return False

    def __lt__(cls, o):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def _same(cls, *a):
        return cls

    __or__ = __ror__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __pow__ = __rpow__ = __and__ = __rand__ = __xor__ = __lshift__ = __rshift__ = _same
    __matmul__ = __rmatmul__ = __neg__ = __pos__ = __invert__ = __abs__ = _same


def _cls(name):
    return _Meta(str(name), (), {"__init_subclass__": classmethod(lambda cls, **kw: None)})


class _Value(str):
    """What a stand-in call returns: the text 'stub', falsy, zero, any attribute another value."""

    def __new__(cls, *a, **k):
        return str.__new__(cls, "stub")

    def __hash__(self):
        return id(self)

    def __eq__(self, o):
        return self is o

    def __ne__(self, o):
        return self is not o

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Value()

    def __call__(self, *a, **k):
        if len(a) == 1 and not k and isinstance(a[0], types.FunctionType):
            return a[0]
        return _Value()

    def __getitem__(self, k):
        return _Value()

    def __setitem__(self, k, v):
        pass

    def __delitem__(self, k):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    def __index__(self):
        return 0

    def __float__(self):
        return 0.0

    def __contains__(self, o):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __lt__(self, o):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def _same(self, *a):
        return self

    __or__ = __ror__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __pow__ = __rpow__ = __and__ = __rand__ = __xor__ = __lshift__ = __rshift__ = _same
    __matmul__ = __rmatmul__ = __neg__ = __pos__ = __invert__ = __abs__ = _same


class _Module(types.ModuleType):
    __version__ = TORCH_VERSION

    def __getattr__(self, name):
        if (name.startswith("__") and name.endswith("__")) or name in ABSENT_ATTRS:
            raise AttributeError(name)
        return _cls(name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        m = _Module(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: answers only for modules no other finder has."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top == "sglang":
            return None
        if top not in STANDS_IN:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                try:
                    found = finder.find_spec(name, path, target)
                except Exception:
                    found = None
                if found is not None:
                    return None
            if _probing() or not _imported_by_sglang():
                return None
        STANDS_IN.add(top)
        return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)


def build_parser(site):
    sys.path.insert(0, site)
    sys.meta_path.append(_Finder())
    # SGLang picks its platform at import; without a GPU, its CPU platform.
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    package = types.ModuleType("sglang")
    package.__path__ = [os.path.join(site, "sglang")]
    sys.modules["sglang"] = package
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    try:
        from sglang.version import __version__ as version
    except Exception:
        version = "unknown"
    return parser, version


def engine_args(words):
    """The arguments after the program words, or None when the words start no SGLang server."""
    if not words:
        return None
    first = os.path.basename(words[0])
    if first.startswith("python") and words[1:3] == ["-m", "sglang.launch_server"]:
        return words[3:]
    if first == "sglang" and words[1:2] == ["serve"]:
        return words[2:]
    if words[0].startswith("-"):
        return words
    return None


def verdict(parser, words):
    args = engine_args(words)
    if args is None:
        return {"ok": False, "error": "not an SGLang server command: %r" % " ".join(words[:3])}
    if "-h" in args or "--help" in args:
        return {"ok": False, "error": "asks for help, not a server"}
    if "--config" in args:
        return {"ok": False, "error": "--config merges a file into the line; not checked here"}
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as e:
        message = err.getvalue().strip().splitlines()
        return {"ok": False, "exit": e.code, "error": message[-1] if message else "exit %s" % e.code}
    return {"ok": True}


def resolve(parser, word):
    """Which flag argparse reads `word` as (its option-string lookup, abbreviations included)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            found = parser._parse_optional(word)
    except SystemExit:
        message = err.getvalue().strip().splitlines()
        return {"ambiguous": message[-1] if message else "ambiguous"}
    # Python 3.12.7 and later return a list of matches; earlier ones one tuple.
    if isinstance(found, list):
        found = found[0] if len(found) == 1 else None
    action = found[0] if found else None
    return {"options": list(action.option_strings) if action is not None else None}


def main():
    if len(sys.argv) != 2:
        print("usage: sglang_parse.py SITE < lines.jsonl", file=sys.stderr)
        return 2
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        parser, version = build_parser(sys.argv[1])
    print(json.dumps({"sglang": version, "flags": len(parser._actions), "stand_ins": sorted(STANDS_IN)}))
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        words = json.loads(line)
        if isinstance(words, dict):
            print(json.dumps(resolve(parser, words["resolve"])), flush=True)
            continue
        print(json.dumps(verdict(parser, words)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
