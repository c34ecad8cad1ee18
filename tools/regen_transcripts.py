#!/usr/bin/env python3
"""Regenerate the ``$ trainscope …`` transcripts in README.md and docs/*.md from the program itself.

A transcript is a ```text (or ```console) block line starting with ``$ `` followed by the output the
docs show. The docs show *excerpts*: a line that is exactly ``…`` stands for omitted lines, and a line
ending in ``…`` is cut at that width. Regenerating keeps that shape: each run of lines between
``…`` markers is found again in the real output by its first line's leading words (up to the first
digit) and replaced by the same number of real lines, cut at the same widths; a transcript with no
``…`` at all is the whole output and is replaced whole.

Only transcripts that are reproducible here are regenerated: one ``trainscope`` command on files
bundled in the repository (no shell operators, no ``watch`` — a live session — and no ``--deep``,
whose figures include HTA's own timings). Every other transcript is listed with the reason.

    python tools/regen_transcripts.py          # rewrite the docs in place
    python tools/regen_transcripts.py --check  # exit 1 and show the differences if any is stale

``tests/test_readme.py`` runs the check, so a change of output fails until the docs follow.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(text|console)\n(.*?)^```", re.S | re.M)
ELLIPSIS = "…"
_ANCHOR = re.compile(r"^[^\d]*")


@dataclass
class Transcript:
    doc: Path
    command: str
    start: int  # offset of the first output line in the document text
    end: int  # offset just past the last output line
    shown: list[str]  # the output lines the doc shows
    skip: str | None = None  # why it is not regenerated


def _skip_reason(command: str) -> str | None:
    if re.search(r"&&|;|\||>|<|`|\$\(", command):
        return "shell operators: depends on the commands around it"
    words = shlex.split(command.split(" #")[0])
    if not words or words[0] != "trainscope":
        return "not a trainscope command"
    if len(words) > 1 and words[1] == "watch":
        return "a live session: its samples differ run to run"
    if "--deep" in words:
        return "--deep prints HTA's own timings"
    paths = [
        w
        for w in words[2:]
        if not w.startswith("-")
        and (
            "/" in w
            or re.search(
                r"\.(json|gz|sqlite|pickle|csv|"
                r"jsonl|pt|nsys-rep)$",
                w,
            )
        )
    ]
    if not paths:
        return None
    if not all((ROOT / p).exists() for p in paths):
        return "reads files made by an earlier step (not bundled)"
    return None


def transcripts(doc: Path) -> list[Transcript]:
    text = doc.read_text(encoding="utf-8")
    out: list[Transcript] = []
    for m in FENCE.finditer(text):
        body_start = m.start(2)
        lines = m.group(2).splitlines(keepends=True)
        offsets, pos = [], body_start
        for ln in lines:
            offsets.append(pos)
            pos += len(ln)
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            command = lines[i][2:].rstrip("\n")
            shown = [ln.rstrip("\n") for ln in lines[i + 1 : j]]
            start = offsets[i + 1] if i + 1 < len(lines) else pos
            end = offsets[j] if j < len(lines) else pos
            out.append(Transcript(doc, command, start, end, shown, _skip_reason(command)))
            i = j
    return out


def run(command: str) -> list[str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="100", TERM="dumb")
    words = shlex.split(command.split(" #")[0])
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", *words[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    return (p.stdout + p.stderr).splitlines()


def _anchor(line: str) -> str:
    a = _ANCHOR.match(line.rstrip(ELLIPSIS)).group(0)
    return a if a.strip() else line.rstrip(ELLIPSIS)


def regenerate(shown: list[str], real: list[str]) -> list[str]:
    """The excerpt ``shown`` rebuilt from ``real`` (module doc); raises ValueError when a run of
    lines cannot be found again."""
    segments: list[list[str]] = [[]]
    for ln in shown:
        if ln == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(ln)
    out: list[str] = []
    cursor = 0
    for k, seg in enumerate(segments):
        if k:
            out.append(ELLIPSIS)
        if not seg:
            continue
        anchor = _anchor(seg[0])
        at = next((i for i in range(cursor, len(real)) if real[i].startswith(anchor)), None)
        if at is None:
            raise ValueError(f"no line starting {anchor!r} in the output after line {cursor}")
        if len(segments) == 1:  # a whole transcript: the whole output, however long it now is
            rest = list(real[at:])
            while rest and not rest[-1].strip():
                rest.pop()
            seg = seg + [""] * max(0, len(rest) - len(seg))
            seg = seg[: len(rest)]
        for off, ln in enumerate(seg):
            new = real[at + off] if at + off < len(real) else ""
            if ln.endswith(ELLIPSIS) and len(ln) > 1:
                width = len(ln) - 1
                new = new if len(new) <= width else new[:width] + ELLIPSIS
            out.append(new.rstrip())
        cursor = at + len(seg)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report stale transcripts, change nothing")
    ap.add_argument("docs", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    args = ap.parse_args(argv)
    docs = [d.resolve() for d in args.docs] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = failed = 0
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        edits = []
        for t in transcripts(doc):
            where = f"{doc.relative_to(ROOT)}: $ {t.command}"
            if t.skip:
                print(f"skipped  {where}  ({t.skip})")
                continue
            try:
                new = regenerate(t.shown, run(t.command))
            except ValueError as e:
                print(f"FAILED   {where}: {e}")
                failed += 1
                continue
            if new != t.shown:
                stale += 1
                print(f"{'stale' if args.check else 'updated'}    {where}")
                if args.check:
                    sys.stdout.writelines(
                        difflib.unified_diff(
                            [x + "\n" for x in t.shown], [x + "\n" for x in new], "docs", "program", n=1
                        )
                    )
                edits.append((t.start, t.end, "".join(x + "\n" for x in new)))
            else:
                print(f"current  {where}")
        if edits and not args.check:
            for start, end, new in sorted(edits, reverse=True):
                text = text[:start] + new + text[end:]
            doc.write_text(text, encoding="utf-8")
    return 1 if failed or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
