"""The server's startup arguments ("non-default args: {...}"), read as the Python repr vLLM prints.

vLLM prints its non-default engine arguments with Python's repr; 0.32 nests dataclass reprs
(`KVTransferConfig(kv_connector='OffloadingConnector', ...)`). They are read as literals and
keyword-only dataclass reprs, nothing evaluated, with bounds on size and depth, so a corrupt or
hostile line costs neither memory nor a crash: every failure is a ReprError saying why.
"""

from __future__ import annotations

import ast
from typing import Any


# Bounds of the startup-argument walker (python_repr): vLLM 0.32's args are about 1 KB, 150 nodes,
# 5 levels deep; anything far past these is not a startup line, and must not cost memory or a crash.
MAX_REPR_CHARS = 1 << 16      # the whole text
MAX_REPR_NODES = 20_000       # syntax-tree nodes
MAX_REPR_DEPTH = 32           # nesting of calls, dicts, lists, tuples, sets
MAX_REPR_LITERAL = 1 << 14    # characters of one str/bytes literal, digits of one number


def option_value(argv: list[str] | tuple[str, ...], flag: str) -> str | None:
    """The value a `vllm serve` argv gives `flag` (`--flag=V` or `--flag V`; the first given), or None.
    One reader for every option kvtier looks up in a command it built or a run recorded."""
    for i, a in enumerate(argv):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


class ReprError(ValueError):
    """The startup arguments are not a repr this walker reads (what, and why)."""


def python_repr(text: str) -> Any:
    """A value printed by Python's repr: literals, and dataclass reprs such as vLLM 0.32's
    `KVTransferConfig(kv_connector='OffloadingConnector', ...)`, read as dicts of their fields
    (with the class under "__class__"). Nothing is evaluated: anything else is refused. Bounded
    (MAX_REPR_*): the text, the tree's nodes, its depth and each literal's size; a key twice in
    one dict or call is an error, not last-wins. Every failure, MemoryError and RecursionError
    included, is a ReprError saying which."""
    if len(text) > MAX_REPR_CHARS:
        raise ReprError(f"{len(text):,} characters, more than the {MAX_REPR_CHARS:,} a startup line holds")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        nodes = 0
        for _ in ast.walk(tree):
            nodes += 1
            if nodes > MAX_REPR_NODES:
                raise ReprError(f"more than {MAX_REPR_NODES:,} syntax nodes")
        return _repr_value(tree.body, 0)
    except ReprError:
        raise
    except RecursionError:
        raise ReprError("nested too deeply for the parser (RecursionError)") from None
    except MemoryError:
        raise ReprError("too large to parse (MemoryError)") from None
    except SyntaxError as e:
        raise ReprError(f"not Python syntax ({e.msg})") from None
    except (ValueError, TypeError) as e:
        raise ReprError(str(e) or type(e).__name__) from None


def _repr_key(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise ReprError(f"a dict key that is not hashable ({type(key).__name__})") from None
    return key


def _repr_dict(pairs: list[tuple[Any, Any]], what: str) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, v in pairs:
        if _repr_key(k) in out:
            raise ReprError(f"key {k!r} appears twice in {what}")
        out[k] = v
    return out


def _repr_value(node: ast.expr, depth: int) -> Any:
    if depth > MAX_REPR_DEPTH:
        raise ReprError(f"nested more than {MAX_REPR_DEPTH} levels deep")
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and not node.args and all(k.arg for k in node.keywords)):
            raise ReprError("a call that is not a keyword-only dataclass repr (Name(field=value, ...))")
        fields = _repr_dict([(str(k.arg), _repr_value(k.value, depth + 1)) for k in node.keywords], node.func.id + "(...)")
        if "__class__" in fields:
            raise ReprError("a field named __class__")
        return {"__class__": node.func.id, **fields}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ReprError("** in a dict")
        return _repr_dict([(_repr_value(k, depth + 1), _repr_value(v, depth + 1))  # type: ignore[arg-type]
                           for k, v in zip(node.keys, node.values)], "a dict")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_repr_value(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.Set):
            return [_repr_key(i) for i in items]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (str, bytes)) and len(v) > MAX_REPR_LITERAL:
            raise ReprError(f"a literal of {len(v):,} characters (at most {MAX_REPR_LITERAL:,})")
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 4 * MAX_REPR_LITERAL:
            raise ReprError("a number too long")
        if v is Ellipsis or isinstance(v, complex):
            raise ReprError(f"an {'Ellipsis' if v is Ellipsis else 'complex'} literal")
        return v
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        v = _repr_value(node.operand, depth + 1)
        return -v if isinstance(node.op, ast.USub) else v
    raise ReprError(f"{type(node).__name__} is not a literal or a dataclass repr (nothing is evaluated)")
