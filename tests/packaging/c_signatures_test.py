"""The stub of each function written in C (cuda_reclaim._reclaim) takes the parameters its docstring names.

mypy.stubtest checks names, classes and Python signatures, but a C function without __text_signature__
shows it no parameters; its docstring, though, starts with its signature ("drain(max_items=None,
timeout=0.0) -> int"). This compares those parameter names and defaults with _reclaim.pyi's.
"""

import ast
import os
import re
import types

import pytest

from cuda_reclaim import _reclaim

STUB = os.path.join(os.path.dirname(_reclaim.__file__), "_reclaim.pyi")


def stub_functions():
    tree = ast.parse(open(STUB).read())
    return {node.name: node.args for node in tree.body if isinstance(node, ast.FunctionDef)}


def parameters(arguments):
    """[(name, default or ...)] of an ast.arguments, positional-only and keyword-only alike."""
    positional = arguments.posonlyargs + arguments.args
    defaults = [...] * (len(positional) - len(arguments.defaults)) + [ast.literal_eval(d) for d in arguments.defaults]
    named = list(zip((a.arg for a in positional), defaults))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        named.append((argument.arg, ... if default is None else ast.literal_eval(default)))
    return named


def documented_functions():
    for name, function in sorted(vars(_reclaim).items()):
        if isinstance(function, types.BuiltinFunctionType):
            match = re.match(rf"{re.escape(name)}\(([^)]*)\)", function.__doc__ or "")
            yield name, match.group(1) if match else None


def test_every_c_function_has_a_stub():
    functions = {name for name, _ in documented_functions()}
    assert sorted(functions - set(stub_functions())) == []


@pytest.mark.parametrize("name,signature", [f for f in documented_functions() if f[1] is not None])
def test_stub_parameters_match_the_docstring(name, signature):
    documented = parameters(ast.parse(f"def {name}({signature}): pass").body[0].args)
    assert parameters(stub_functions()[name]) == documented, f"_reclaim.pyi's {name}() vs its docstring"
