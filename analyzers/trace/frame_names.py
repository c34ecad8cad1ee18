"""Python frames named as a user writes them.

Python's profiler names a C function by its object: ``<built-in method tensor of type object at
0x7f…>``. In a PyTorch trace a built-in method of a *type object* is one of torch's functions (they
live on the ``torch._C._VariableFunctions`` type), so it reads ``torch.tensor``; a method of an
instance (``of Tensor object``) reads ``Tensor.softmax``; ``<built-in function len>`` reads ``len``.
Addresses are never shown: they change with every run.
"""

from __future__ import annotations

import re

_TYPE_METHOD = re.compile(r"^<built-in method (?P<name>\w+) of type object at 0x[0-9a-fA-F]+>$")
_METHOD = re.compile(r"^<built-in method (?P<name>\w+) of (?P<owner>[\w.]+) object at 0x[0-9a-fA-F]+>$")
_FUNCTION = re.compile(r"^<built-in function (?P<name>\w+)>$")


def user_name(func: str) -> str:
    """``<built-in method tensor of type object at 0x7f…>`` → ``torch.tensor``; other names unchanged."""
    if m := _TYPE_METHOD.match(func):
        return f"torch.{m['name']}"
    if m := _METHOD.match(func):
        return f"{m['owner']}.{m['name']}"
    if m := _FUNCTION.match(func):
        return m["name"]
    return func
