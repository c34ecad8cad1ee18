"""The fix catalog: what every fix says — its title, its PyTorch change, its CUDA/HIP (native)
change, the basis of its projected gain and its what-if label — kept as data in ``fixes.toml``
beside this module, one table per fix keyed by its recommendation id.

What is logic stays with the finding that declares the fix: how its gain is projected, where it
applies, what supersedes it and its wording in the run's context. :func:`catalog_fix` joins the
two into the frozen :class:`~trainscope.analyzers.findings.base.Fix` every consumer reads::

    fix=catalog_fix("remove-syncs", projection="idle", text=_sync_words)

The file is read once, at import; a fix missing from it, a table lacking a text or naming an
unknown field fails the import with the fix's id.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields
from dataclasses import replace
from importlib import resources
from typing import TypedDict
from typing import Unpack

from trainscope.analyzers.findings.base import Fix
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import FixWords
from trainscope.analyzers.findings.base import Situated
from trainscope.analyzers.trace.context import Context

_PACKAGE = __name__.rpartition(".")[0]  # trainscope.analyzers.findings
CATALOG_FILE = "fixes.toml"  # its package data (pyproject.toml: [tool.setuptools.package-data])


@dataclass(frozen=True)
class FixEntry:
    """One table of the catalog: the texts of a fix (or of a variant of it)."""

    title: str
    pytorch: str  # the change in a PyTorch training or inference script
    native: str  # the equivalent for a CUDA/HIP application without PyTorch
    basis: str = ""  # what the projection assumes ("{stake:.1f}" filled by the recommendations), or why none
    whatif_label: str = ""  # the assumption, as a what-if toggle reads it


_FIELDS = frozenset(f.name for f in fields(FixEntry))
_REQUIRED = ("title", "pytorch", "native")

# A catalog key: (rec_id, variant); variant None is the fix itself.
Key = tuple[str, "str | None"]


def _texts(where: str, table: Mapping[str, object]) -> dict[str, str]:
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ValueError(f"{CATALOG_FILE}: [{where}] has unknown fields {unknown} (known: {sorted(_FIELDS)})")
    bad = sorted(k for k, v in table.items() if not isinstance(v, str))
    if bad:
        raise ValueError(f"{CATALOG_FILE}: [{where}] fields {bad} are not strings")
    return {k: str(v) for k, v in table.items()}


def parse(text: str) -> dict[Key, FixEntry]:
    """The catalog's entries by (rec_id, variant). A sub-table ``[rec-id.variant]`` is a variant of
    its fix for a particular context: the fields it sets replace the fix's."""
    out: dict[Key, FixEntry] = {}
    for rec_id, table in tomllib.loads(text).items():
        if not isinstance(table, dict):
            raise ValueError(f"{CATALOG_FILE}: {rec_id} is not a table")
        own = {k: v for k, v in table.items() if not isinstance(v, dict)}
        missing = [k for k in _REQUIRED if not own.get(k)]
        if missing:
            raise ValueError(f"{CATALOG_FILE}: [{rec_id}] lacks {missing}")
        base = FixEntry(**_texts(rec_id, own))
        out[(rec_id, None)] = base
        for variant, sub in table.items():
            if isinstance(sub, dict):
                out[(rec_id, variant)] = replace(base, **_texts(f"{rec_id}.{variant}", sub))
    return out


CATALOG: dict[Key, FixEntry] = parse(resources.files(_PACKAGE).joinpath(CATALOG_FILE).read_text(encoding="utf-8"))


def entry(rec_id: str, variant: str | None = None, fill: Mapping[str, str] | None = None) -> FixEntry:
    """The catalog's texts of fix ``rec_id`` (its ``variant``), with each ``{NAME}`` of ``fill``
    replaced by its value in the code (a constant the declaring module also states elsewhere)."""
    try:
        e = CATALOG[(rec_id, variant)]
    except KeyError:
        name = rec_id if variant is None else f"{rec_id}.{variant}"
        raise LookupError(f"fix [{name}] is not in the fix catalog ({_PACKAGE}/{CATALOG_FILE})") from None
    for name, value in (fill or {}).items():
        e = replace(e, pytorch=e.pytorch.replace(f"{{{name}}}", value), native=e.native.replace(f"{{{name}}}", value))
    return e


def catalog_words(rec_id: str, native: bool) -> FixText:
    """The catalog's own wording of fix ``rec_id``: its title and its native or PyTorch change (for a
    ``text`` function whose wording for some runs is the catalog's)."""
    e = entry(rec_id)
    return FixText(rec_id, e.title, e.native if native else e.pytorch)


class FixLogic(TypedDict, total=False):
    """What a finding declares of its fix beyond the catalog's texts (see :class:`Fix`)."""

    projection: str
    applies: Callable[[Context | None], bool]
    superseded_by: tuple[str, ...]
    text: FixWords | None
    cold_start: Callable[[Context], FixText] | None
    situated: Situated | None


def catalog_fix(
    rec_id: str, *, variant: str | None = None, fill: Mapping[str, str] | None = None, **logic: Unpack[FixLogic]
) -> Fix:
    """The fix ``rec_id``: its texts from the catalog, its logic as declared here."""
    e = entry(rec_id, variant, fill)
    return Fix(rec_id, e.title, e.pytorch, e.native, basis=e.basis, whatif_label=e.whatif_label, **logic)
