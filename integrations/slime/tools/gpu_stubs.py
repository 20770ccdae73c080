"""GPU-only packages as empty stand-ins, for the tools that import a trainer's real code on a CPU machine.

install(prefixes) puts a meta-path finder first that answers every import of
those top-level packages (and their submodules) with an empty package whose
every attribute is _Anything: a class-like name for capitalised attributes,
an instance otherwise. The trainers import them at module level; the checks
never call into them.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Anything:
    """A stand-in for any name a stubbed package exports (never called here)."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


def _stub_attr(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Anything if attr[:1].isupper() else _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The packages in PREFIXES (and their submodules) as empty packages
    whose every attribute is _Anything."""
    PREFIXES = ()

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.PREFIXES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _stub_attr
        return m

    def exec_module(self, module):
        pass


def install(prefixes):
    finder = _StubFinder()
    finder.PREFIXES = tuple(prefixes)
    sys.meta_path.insert(0, finder)
