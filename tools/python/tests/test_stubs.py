"""The type stubs (_fgds.pyi, shipped with py.typed) name what the
extension has, with the same parameters and defaults."""

import ast
import inspect
import os

import fgds
from fgds import _fgds

PKG = os.path.dirname(fgds.__file__)


def stub_tree():
    with open(os.path.join(PKG, "_fgds.pyi")) as f:
        return ast.parse(f.read())


def params(fn):
    """(name, default source or None, kind) of a stub function."""
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(pos, defaults):
        out.append((p.arg, None if d is None else ast.literal_eval(d), "pos"))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, None if d is None else ast.literal_eval(d), "kw"))
    return out


def real_params(obj):
    sig = inspect.signature(obj)
    out = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        d = None if p.default is p.empty else p.default
        out.append((p.name, d, "kw" if p.kind == p.KEYWORD_ONLY else "pos"))
    return out


def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(PKG, "py.typed"))
    assert os.path.exists(os.path.join(PKG, "_fgds.pyi"))


def test_stubs_match_the_extension():
    tree = stub_tree()
    top = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top[node.target.id] = node
    public = {n for n in dir(_fgds) if not n.startswith("_")}
    stubbed = {n for n in top if not n.startswith("_")}
    assert public == stubbed, (public - stubbed, stubbed - public)
    for name in public:
        obj, node = getattr(_fgds, name), top[name]
        if isinstance(node, ast.FunctionDef):
            assert params(node) == real_params(obj), name
        if not isinstance(node, ast.ClassDef) or name == "FgdsError":
            continue
        members = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        real = {k for k in vars(obj) if not k.startswith("__")}
        assert real == {k for k in members if not k.startswith("__")}, name
        for k, fn in members.items():
            attr = vars(obj).get(k)
            is_prop = any(getattr(d, "id", None) == "property" for d in fn.decorator_list)
            if k == "__new__":
                # the class's own text signature is its constructor's
                sig = obj.__text_signature__
                if sig:
                    want = real_params(obj)
                    assert params(fn)[1:] == want, name
                continue
            if k.startswith("__"):
                continue
            if is_prop:
                assert type(attr).__name__ == "getset_descriptor", f"{name}.{k} is not a property"
                continue
            assert type(attr).__name__ != "getset_descriptor", f"{name}.{k} is a property"
            real_fn = getattr(obj, k)
            got = params(fn)
            if got and got[0][0] == "self":
                got = got[1:]
            want = real_params(real_fn)
            if want and want[0][0] == "self":
                want = want[1:]
            assert got == want, f"{name}.{k}: stub {got} != {want}"
