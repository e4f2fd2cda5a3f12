"""Every function written in C (cuda_reclaim._reclaim) has a __text_signature__, and its stub in
_reclaim.pyi takes the same parameters.

mypy.stubtest checks names, classes and Python signatures; this pins what it cannot see of a C function:
that inspect.signature() can read it at all, and that the stub's parameter names, kinds and defaults are
the ones the function's text signature declares.
"""

import ast
import inspect
import os
import types

import pytest

from cuda_reclaim import _reclaim

STUB = os.path.join(os.path.dirname(_reclaim.__file__), "_reclaim.pyi")
KINDS = {
    "posonly": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonly": inspect.Parameter.KEYWORD_ONLY,
}


def stub_functions():
    tree = ast.parse(open(STUB).read())
    return {node.name: node.args for node in tree.body if isinstance(node, ast.FunctionDef)}


def stub_parameters(arguments):
    """[(name, kind, default or ...)] of an ast.arguments."""
    positional = [(a, "posonly") for a in arguments.posonlyargs] + [(a, "args") for a in arguments.args]
    defaults = [...] * (len(positional) - len(arguments.defaults)) + [ast.literal_eval(d) for d in arguments.defaults]
    named = [(a.arg, KINDS[kind], default) for (a, kind), default in zip(positional, defaults)]
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        named.append((argument.arg, KINDS["kwonly"], ... if default is None else ast.literal_eval(default)))
    return named


def builtins():
    return sorted(name for name, f in vars(_reclaim).items() if isinstance(f, types.BuiltinFunctionType))


@pytest.mark.parametrize("name", builtins())
def test_every_c_function_has_a_text_signature(name):
    function = getattr(_reclaim, name)
    assert function.__text_signature__, f"{name}'s docstring lacks the '{name}($module, ...)\\n--\\n\\n' line"
    inspect.signature(function)


def test_every_c_function_has_a_stub():
    assert sorted(set(builtins()) - set(stub_functions())) == []


@pytest.mark.parametrize("name", builtins())
def test_stub_parameters_match_the_text_signature(name):
    signature = inspect.signature(getattr(_reclaim, name))
    declared = [
        (p.name, p.kind, ... if p.default is inspect.Parameter.empty else p.default)
        for p in signature.parameters.values()
    ]
    assert stub_parameters(stub_functions()[name]) == declared, f"_reclaim.pyi's {name}() vs its text signature"
