"""One name per number (issue 37): in every renderer of every bundled trace, one label never carries
two values, and one value never carries two labels within a section — unless the two labels are
declared below as equal by definition, with the reason.

Each renderer is read as a user reads it: the text report, the Markdown report, the HTML page with
its tags stripped (tables kept as rows of cells), the app's overview (key figures and evidence) and
the JSON document's labelled figures (a ``label`` / ``metric`` / ``title`` beside its number). A
figure is a number with its unit (``%`` or ``ms``, kept apart); its label is the words written
right before it in the same cell or clause (a bare number in a column takes its row's name, a
number in parentheses after a title takes the title's). Labels are compared lowercased with the
punctuation taken out; values at the precision both print (56.02 and 56.0 agree at one decimal).
"""

from __future__ import annotations

import functools
import html
import pathlib
import re
from collections import defaultdict
from dataclasses import dataclass

import pytest

DATA = pathlib.Path(__file__).parent / "data"

# One representative per input format and per kind of run, so the module stays well under three
# minutes on one core (every bundled trace takes ≈ 4 min there): a data-bound GPU trace, a
# communication-bound one, an Nsight export with NCCL, a CPU-only trace, the two rank directories
# (DLRM on GPUs, gloo on CPUs) and the 8-rank set made from the DLRM pair (its rank 0 waits for the
# others inside its collectives: the case of the issue).
TRACES = [
    "kineto/resnet50_v100_num_workers_0.pt.trace.json.gz",
    "kineto/hta_a100_nccl.json.gz",
    "kineto/tl_h100_timesformer_k400_infer.json.gz",
    "kineto/hta_v100_test.json.gz",  # its runner-up was 27.8 % in the summary, 27.9 % in the evidence
    "nsys/cs336_ddp_2x3090.sqlite",
    "cpu/slow.pt.trace.json.gz",
    "kineto/hta_dlrm_ws128_2ranks",
    "gloo",
    "dlrm8",
]

# Two labels for one quantity, equal by definition: (label, label) normalized, and why. Nothing
# else may print one value under two names in one section.
_SINK_VS_FINDING = (
    "equal by definition: the verdict's evidence names the sink (analyzers/trace/sinks.py SINK_LABELS) and then its "
    "finding restates the same share under the finding's own metric (analyzers/findings/)"
)
_TITLE = (
    "equal by definition: the verdict's summary opens with its finding's title and stake, which the evidence restates"
)
_TITLE_VS_FINDING = (
    "equal by definition: the verdict's summary opens with its finding's title and stake, which the finding's "
    "evidence restates"
)
ALIASES: dict[frozenset[str], str] = {
    frozenset(("communication not overlapped with compute", "communication with no compute running")): _SINK_VS_FINDING,
    frozenset(
        ("input pipeline gpu idle while the host loads or preprocesses data", "gpu idle while waiting for data")
    ): _SINK_VS_FINDING,
    frozenset(
        (
            "input pipeline gpu idle while the host loads or preprocesses data",
            "gpu idle while the host preprocesses input",
        )
    ): _SINK_VS_FINDING,
    frozenset(
        ("launch/cpu overhead gpu idle while the host issues work", "gpu idle while the host launches/computes")
    ): _SINK_VS_FINDING,
    frozenset(("training waits on the input pipeline", "gpu idle while waiting for data")): _TITLE_VS_FINDING,
    frozenset(
        ("all to all exchange not overlapped with compute", "communication with no compute running")
    ): _TITLE_VS_FINDING,
    frozenset(
        ("training waits on the input pipeline", "input pipeline gpu idle while the host loads or preprocesses data")
    ): _TITLE,
    frozenset(("all to all exchange not overlapped with compute", "communication not overlapped with compute")): _TITLE,
    frozenset(("the pipeline waits on input", "data wait")): (
        "equal by definition: the breakdown's input row is refiled to the input sink, and the header's data wait "
        "counts that row where it is larger (analyzers/trace/breakdown.py refiled; one story, issue 23)"
    ),
    frozenset(("imbalance sink ms per step", "waiting inside collectives per step from arrival to the last rank s")): (
        "equal by definition: the cross-rank correction sets the imbalance sink to the wait the alignment measured "
        "(analyzers/ranks/alignment.py with_aligned_imbalance)"
    ),
    frozenset(("gpu waits for the host to issue work", "gpu idle while the host launches/computes")): _TITLE,
    frozenset(
        ("gpu waits for the host to issue work", "launch/cpu overhead gpu idle while the host issues work")
    ): _TITLE,
    frozenset(
        (
            "blocking synchronizations gpu idle while or after the host waits on it",
            "gpu idle while the host synchronizes",
        )
    ): _SINK_VS_FINDING,
    frozenset(("host device copies not overlapped with compute", "gpu busy only with memory copies")): _SINK_VS_FINDING,
    frozenset(
        (
            "allocator churn gpu idle while the host allocates or frees memory creates events or streams",
            "gpu idle while the host allocates or frees memory allocator event and stream calls",
        )
    ): _SINK_VS_FINDING,
    frozenset(
        (
            "compute bound kernel time",
            "compute bound kernels roofline intensity ridge point share of compute kernel time",
        )
    ): (
        "two quantities, each naming its whole (the step; the compute kernels' time), equal where the GPU runs "
        "compute kernels the whole step (tl_mi300x_torch_compile_triton: 93.3 % of both)"
    ),
    frozenset(
        ("memory bound kernel time", "memory bound kernels roofline intensity ridge point share of compute kernel time")
    ): (
        "two quantities, each naming its whole (the step; the compute kernels' time), equal where the GPU runs "
        "compute kernels the whole step (tl_mi300x_torch_compile_triton: 6.66 % of both)"
    ),
    frozenset(
        (
            "compute bound kernel time share of step time",
            "compute bound kernels roofline intensity ridge point share of compute kernel time",
        )
    ): (
        "two quantities, each naming its whole (the step; the compute kernels' time), equal where the GPU runs "
        "compute kernels the whole step (tl_mi300x_torch_compile_triton: 93.3 % of both)"
    ),
}
# A part equal to its whole: the GPU-idle gap class that feeds a sink ("GPU idle, … → launch",
# analyzers/trace/gpu_gaps.py SINK_OF) is one part of that sink; where it is the sink's only part, the two
# print one value. The whole's labels by sink (normalized), and why.
WHOLE_OF_SINK: dict[str, re.Pattern[str]] = {
    "launch": re.compile(
        r"^(launch/cpu overhead|gpu idle while the host launches/computes|gpu waits for the host to issue)"
    ),
    "sync": re.compile(r"^(blocking synchroni|gpu idle while the host synchronizes)"),
    "host-ranges": re.compile(r"^gpu idle while the host works in named ranges"),
}
PART_REASON = "a sink is the GPU idle of the gap classes that feed it: one class, all of it"
# Per-range rows ("GPU idle inside host range 'X'"): each range's own figure, inclusive, like a call
# stack's; a range nested in another holds all of its idle where the outer one does nothing else
# (nvfuser_h200_cross_entropy_jit: getKernelRuntimeFor and its compileNewKRT, 278.48 ms each).
PER_RANGE = "gpu idle inside host range "


def _part_of(part: str, whole: str) -> bool:
    """Whether ``part`` names a gap class (its label, or the text report's head of it) feeding the sink
    ``whole`` names."""
    from trainscope.analyzers.trace.gpu_gaps import LABELS
    from trainscope.analyzers.trace.gpu_gaps import SINK_OF

    for cls, sink in SINK_OF.items():
        full = norm_label(f"GPU idle, {LABELS[cls]} → {sink}")
        if len(part) >= 20 and full.startswith(part) and sink in WHOLE_OF_SINK and WHOLE_OF_SINK[sink].match(whole):
            return True
    return False


# The sections compared: the figures that sum up a run (the header, the verdict and its evidence,
# the step breakdown, the app's key figures; in the document, the verdict and the breakdown).
# Per-item tables (kernels, roofline, phases, ledger, ranks, stragglers) are left out: their rows
# are named by kernel, phase or rank names that the renderers shorten, so one shortened name can
# stand for two rows — a limit of reading the page, not two names for one number.
SECTIONS = re.compile(r"^(trainscope( report)?|verdict|evidence|where step time goes|key figures|breakdown)\b", re.I)
# A role, not a name: "largest sink of step time: X 33.9 %" names the figure X.
_ROLE = re.compile(r"^(largest sink of step time|runner up sink) ")


@dataclass(frozen=True)
class Figure:
    section: str
    label: str  # normalized
    value: float
    decimals: int
    unit: str  # "%" | "ms"
    raw: str  # the line it was read from, for the failure message


_NUM = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?(%|ms)(?![\w])")
_ANY_NUM = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
# What ends a label going backwards from its number: clause punctuation, a column gap, a bracket.
_SEP = re.compile(r"\s{2,}|[;,·—=+|()\[\]:<>≥≤]|(?<=\s)-(?=\s)")
_UNIT_TAIL = re.compile(r"^\s*(of (step|kernel) time|per step|per rank|/step|of the step|late)?\s*$")
_BARS = re.compile(r"[█▏▎▍▌▋▊▉·▁▂▃▄▅▆▇]{3,}|\|[▁▂▃▄▅▆▇█ ]+\|")
_MARKS = re.compile(r"^[\s✔✘▶◀•*\-]+")
_STOP = {"", "of", "at", "at most", "up to", "and", "or", "the", "a", "in", "by", "from", "is", "to", "with"}


def norm_label(s: str) -> str:
    s = _MARKS.sub("", s).lower()
    s = re.sub(r"[^\w%/ ]+", " ", s)
    s = re.sub(r"\s+", " ", s).strip()
    return _ROLE.sub("", s)


def _decimals(num: str) -> int:
    return len(num.split(".")[1]) if "." in num else 0


def _label_before(line: str, start: int, floor: int) -> tuple[str, str]:
    """The label right before ``start`` (no further back than ``floor``) and the separator before it."""
    seg = line[floor:start]
    cut, sep = 0, ""
    for m in _SEP.finditer(seg):
        cut, sep = m.end(), m.group()
    return seg[cut:].strip(), sep.strip()


_GENERIC_STATS = {"p5", "p50", "p95", "max", "min", "mean", "median", "busy", "late", "step p50", "at most"}
_LEADING = re.compile(r"^\s*(?:%|ms|vs|against|and|of|then|so)(?:\s+|$)")


def _clean(label: str) -> str:
    key = norm_label(label)
    prev = None
    while prev != key:
        prev, key = key, _LEADING.sub("", key).strip()
    return key


def figures_of_line(line: str, section: str, prefix: str = "") -> list[Figure]:
    """The (label, value) figures of one line of rendered text (see the module's docstring);
    ``prefix``: the row's name, for a table's cell."""
    line = _BARS.sub("  ", line)
    out: list[Figure] = []
    matches = list(_NUM.finditer(line))
    if not matches:
        return out
    nums = list(_ANY_NUM.finditer(line))
    row = re.match(r"\s*(rank\s+\S+)\s", line)
    row_key = norm_label(row.group(1)) if row else ""
    prev_label, prev_end = "", 0
    for m in matches:
        floor = max([n.end() for n in nums if n.end() <= m.start()], default=0)
        label, sep = _label_before(line, m.start(), floor)
        words = norm_label(label).split()
        if words and words[-1] in ("the", "a"):  # "removing the 39.6 % data wait": named after the figure
            after = re.split(r"[:;,()=]|\s{2,}", line[m.end() :], maxsplit=1)[0]
            label = after if _clean(after) else label
        if not _clean(label) or _clean(label) in _STOP:
            before = line[: m.start()].rstrip()
            if sep == "(" or before.endswith("("):
                # "title (20.9 % of step time)"; "33.9 % of step time (59.27 ms per step)"
                head = before[:-1] if before.endswith("(") else before
                if prev_label and _UNIT_TAIL.match(line[prev_end : len(head)]):
                    label = prev_label
                else:
                    label, _ = _label_before(line, len(head), floor)
            elif sep in ("—", ":", "="):
                label, _ = _label_before(line, len(before) - 1, floor)
            elif re.search(r"\s{2,}$", line[: m.start()]) or not line[: m.start()].strip():
                # a bare figure in a column: the cell before it names it, when that cell holds no number
                cells = [c for c in re.split(r"\s{2,}|\s\|\s", line[: m.start()]) if c.strip()]
                if cells and not _ANY_NUM.search(cells[-1]):
                    label = cells[-1]
        key = _clean(label)
        if prefix:
            key = f"{prefix} {key}".strip()
        elif key in _GENERIC_STATS:  # "p50 619.3 ms" names nothing alone: the row's or the section's
            if row_key:
                key = f"{row_key} {key}"
            elif line[:1].strip():
                key = f"{norm_label(section)} {key}"
        if key in _STOP or len(re.sub(r"[^a-z]", "", key)) < 2:
            prev_label, prev_end = "", m.end()
            continue
        num = m.group(1).replace(",", "")
        out.append(Figure(section, key, float(num), _decimals(num), m.group(2), line.strip()))
        prev_label, prev_end = label, m.end()
    return out


_CELL = re.compile(r"^\s*⟦(.*?)⟧ (.*)$")


def text_figures(text: str, heading=lambda line: bool(line) and not line[0].isspace()) -> list[Figure]:
    """Figures of a text rendering; a line that starts in the first column opens a section. A
    table's cell comes spelled out as ``⟦row name and column⟧ cell``."""
    out: list[Figure] = []
    section = ""
    for line in text.splitlines():
        if heading(line):
            section = re.split(r"\s{2,}|:", line.lstrip("#* "), maxsplit=1)[0].strip()
        if re.match(r"^  [✔✘ ] \S", line) and section == "Evidence":  # the source column holds no figure of its own
            line = line[:69]
        if "one-off costs:" in line:  # a list of start-up costs, by kind: two of one kind are two costs
            continue
        cell = _CELL.match(line)
        out += (
            figures_of_line(cell.group(2), section, norm_label(cell.group(1)))
            if cell
            else figures_of_line(line, section)
        )
    return out


# -- tables of the Markdown report and the HTML page: each row spelled out as "name header value" --
_NAME_COLUMNS = ("evidence", "category", "phase", "kernel", "rank", "step", "bound by", "on the path", "metric")
_GENERIC = ("value", "share", "crossed", "threshold", "source", "share of step time", "share of critical path")


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """Each numeric cell of a table as ``⟦row name and column⟧ cell`` (the row's name: its cell in
    the first naming column; the column's header unless it is a generic "value" or "share")."""
    hdr = [h.strip().lower() for h in header]
    if hdr and hdr[0] == "step":  # one row per step: each step's own figures, not the run's
        return []
    name_col = next((i for i, h in enumerate(hdr) if h in _NAME_COLUMNS), 0)
    out = []
    for cells in rows:
        name = cells[name_col].strip().replace("⟧", "") if name_col < len(cells) else ""
        for i, c in enumerate(cells):
            if i == name_col or i >= len(hdr) or not _ANY_NUM.search(c) or hdr[i] in ("threshold", "source"):
                continue
            if hdr[i] in ("p50 ms", "p95 ms"):  # a row's spread: p50 = p95 for one step, by definition
                continue
            h = hdr[i]
            unit = " ms" if re.search(r"\bms\b", h) and not re.search(r"%|\bms\b", c) else ""
            h = re.sub(r"\bms\b|/step|\(|\)", "", h).strip()
            qual = "" if h in _GENERIC else f" {h}"
            out.append(f"⟦{name}{qual}⟧ {c.strip()}{unit}")
    return out


def markdown_text(md: str) -> str:
    """The Markdown report with its escapes undone and its tables spelled out row by row."""
    md = re.sub(r"\\(.)", r"\1", html.unescape(md))
    lines, out, i = md.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            header = line.strip("|").split("|")
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i].strip().strip("|").split("|"))
                i += 1
            out += ["  " + x for x in table_lines(header, rows)]
            continue
        out.append(line if line.startswith("#") else "  " + line)
        i += 1
    return "\n".join(out)


def html_text(page: str) -> str:
    """The HTML page as text: headings open sections, table rows spelled out, tags stripped."""
    page = re.sub(r"<(style|svg|title)\b.*?</\1>", " ", page, flags=re.S)
    out: list[str] = []

    def table(m: re.Match) -> str:
        rows = re.findall(r"<tr>(.*?)</tr>", m.group(0), flags=re.S)
        cells = [[re.sub(r"<[^>]+>", " ", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]
        if not cells:
            return ""
        return "\n" + "\n".join("  " + x for x in table_lines(cells[0], cells[1:])) + "\n"

    page = re.sub(r"<table>.*?</table>", table, page, flags=re.S)
    page = re.sub(r"<h[12][^>]*>(.*?)</h[12]>", lambda m: "\n# " + m.group(1) + "\n", page, flags=re.S)
    page = re.sub(r"<(p|li|div|pre|br)\b[^>]*>", "\n  ", page)
    for line in html.unescape(re.sub(r"<[^>]+>", " ", page)).splitlines():
        out.append(line if line.startswith("#") else "  " + line)
    return "\n".join(out)


def json_figures(doc: dict) -> list[Figure]:
    """The document's labelled figures: every object with a label (``label``, ``metric``, ``title``)
    beside its number (``pct``, ``value``, ``stake_pct``, ``ms_per_step``), in the section (top-level
    key) it lies in."""
    out: list[Figure] = []

    def walk(x, section: str) -> None:
        if isinstance(x, dict):
            label = next((x[k] for k in ("label", "metric", "title") if isinstance(x.get(k), str)), None)
            if label is not None:
                for k, unit in (("pct", "%"), ("stake_pct", "%"), ("ms_per_step", "ms"), ("value", None)):
                    v = x.get(k)
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        u = unit or (
                            "%" if str(x.get("unit", "")).startswith("%") else "ms" if x.get("unit") == "ms" else ""
                        )
                        if u:
                            out.append(Figure(section, norm_label(label), float(v), 2, u, f"{label}: {v}"))
            for v in x.values():
                walk(v, section)
        elif isinstance(x, list):
            for v in x:
                walk(v, section)

    for key, v in doc.items():
        walk(v, key)
    return out


# -- the checks ----------------------------------------------------------------------------------


def _agree(a: Figure, b: Figure) -> bool:
    d = min(a.decimals, b.decimals)
    return abs(a.value - b.value) <= 0.5 * 10**-d + 1e-9


def one_label_two_values(figs: list[Figure]) -> list[str]:
    by: dict[tuple[str, str], list[Figure]] = defaultdict(list)
    for f in figs:
        by[f.label, f.unit].append(f)
    bad = []
    for (label, unit), fs in by.items():
        for i, a in enumerate(fs):
            other = next((b for b in fs[i + 1 :] if not _agree(a, b)), None)
            if other is not None:
                bad.append(f"{label!r}: {a.value:g} {unit} ({a.raw!r}) and {other.value:g} {unit} ({other.raw!r})")
                break
    return bad


def _significant(f: Figure) -> bool:
    """A value precise enough that two equal ones are one quantity, not a coincidence: three
    significant digits at least, and not zero."""
    digits = len(re.sub(r"^0+", "", f"{f.value:.{f.decimals}f}".replace(".", "")))
    return f.value != 0 and digits >= 3


def _aliased(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are a declared alias pair (a label the text report shortened with "…"
    is a prefix of its full name), or a part and the whole it is all of (:func:`_part_of`)."""
    if _part_of(a, b) or _part_of(b, a):
        return True
    if a.startswith(PER_RANGE) and b.startswith(PER_RANGE):
        return True
    for pair in ALIASES:
        x, y = tuple(pair)
        if (x.startswith(a) and y.startswith(b)) or (x.startswith(b) and y.startswith(a)):
            return True
    return False


def one_value_two_labels(figs: list[Figure]) -> list[str]:
    by: dict[tuple[str, str, str], dict[str, Figure]] = defaultdict(dict)
    for f in figs:
        if _significant(f):
            by[f.section, f.unit, f"{f.value:.{f.decimals}f}"].setdefault(f.label, f)
    bad = []
    for (section, unit, value), labels in by.items():
        names = sorted(labels)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if a.startswith(b) or b.startswith(a) or _aliased(a, b):
                    continue
                bad.append(f"[{section}] {value} {unit} as {a!r} ({labels[a].raw!r}) and {b!r} ({labels[b].raw!r})")
    return bad


# -- the renderers of a bundled trace --------------------------------------------------------------


@functools.cache
def _dlrm8() -> str:
    import tempfile

    from tests.conftest import dlrm_rank_dir

    out = pathlib.Path(tempfile.mkdtemp(prefix="dlrm8-"))
    return str(dlrm_rank_dir(out, 8))


@pytest.fixture(scope="module", autouse=True)
def _remove_the_8_rank_set():
    yield
    if _dlrm8.cache_info().currsize:
        import shutil

        shutil.rmtree(_dlrm8(), ignore_errors=True)


@functools.cache
def report(name: str):
    import trainscope.api as ts

    path = _dlrm8() if name == "dlrm8" else str(DATA / name)
    return ts.analyze(path, jobs=1)


def overview_text(doc: dict) -> str:
    from trainscope.tui.overview import evidence_line
    from trainscope.tui.overview import key_figures

    lines = ["Key figures"] + [f"  {label}  {value}" for label, value in key_figures(doc)]
    lines += ["Evidence"]
    for e in doc["verdict"]["evidence"]:  # "✔ metric: value  (threshold …)  — source": the metric names the value
        line = evidence_line(e).plain.split("  (threshold")[0].split("  — ")[0]
        head = f"{line[:2]}{e['metric']}: "
        lines.append(f"  ⟦{e['metric']}⟧ {line[len(head) :]}" if line.startswith(head) else "  " + line)
    return "\n".join(lines)


@functools.cache
def renderings(name: str) -> dict[str, list[Figure]]:
    """Every renderer's figures of one bundled trace; for a rank set, also each other rank's own
    report as the app shows it (its document alone)."""
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    r = report(name)
    docs = {"": r.to_dict()}
    for i in range(len(r.ranks)):
        if i != r.main_index:
            docs[f" rank {r.ranks[i].rank}"] = {
                "tool": docs[""]["tool"],
                "schema": docs[""]["schema"],
                **r.rank_view(i).doc,
            }
    out: dict[str, list[Figure]] = {}
    for tag, doc in docs.items():
        out["text" + tag] = text_figures(render_text(doc))
        out["markdown" + tag] = text_figures(markdown_text(render_markdown(doc)), lambda s: s.startswith("#"))
        out["html" + tag] = text_figures(html_text(render_html(doc)), lambda s: s.startswith("#"))
        out["app" + tag] = text_figures(overview_text(doc))
        out["json" + tag] = json_figures(doc)
    return out


def document_renderings(doc: dict) -> dict[str, list[Figure]]:
    """Every renderer's figures of one analysis document (no rank views)."""
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    return {
        "text": text_figures(render_text(doc)),
        "markdown": text_figures(markdown_text(render_markdown(doc)), lambda s: s.startswith("#")),
        "html": text_figures(html_text(render_html(doc)), lambda s: s.startswith("#")),
        "app": text_figures(overview_text(doc)),
        "json": json_figures(doc),
    }


GOLDEN = pathlib.Path(__file__).parent / "golden"
# Every bundled trace, read from its golden document (tests/test_golden.py holds each equal to what
# the analysis writes today), so the whole set costs no analysis: the renderers run on the document.
GOLDEN_ANALYSES = sorted(p.name for p in GOLDEN.glob("analyze-*.json"))


def golden_document(name: str) -> dict:
    import json

    doc = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    doc.setdefault("tool", {}).setdefault("version", "0")  # a volatile field the golden file leaves out
    return doc


def summary(figs: list[Figure]) -> list[Figure]:
    return [f for f in figs if SECTIONS.match(f.section)]


@pytest.mark.parametrize("name", GOLDEN_ANALYSES)
def test_every_bundled_traces_renderers_give_one_name_per_number(name):
    """Both checks on every bundled trace's document, in every renderer."""
    figs = {k: summary(v) for k, v in document_renderings(golden_document(name)).items()}
    bad = {k: one_label_two_values(f) + one_value_two_labels(f) for k, f in figs.items()}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad
    assert sum(map(len, figs.values())) >= 20  # the renderers were read: every document has a verdict and a breakdown


def test_the_golden_set_is_every_bundled_analysis():
    from tests.test_golden import CASES

    assert sorted(f"{n}.json" for n, argv in CASES.items() if argv[0] == "analyze") == GOLDEN_ANALYSES
    assert len(GOLDEN_ANALYSES) >= 29


@pytest.mark.parametrize("name", TRACES)
def test_one_label_never_carries_two_values(name):
    bad = {k: one_label_two_values(summary(figs)) for k, figs in renderings(name).items()}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


@pytest.mark.parametrize("name", TRACES)
def test_one_value_never_carries_two_labels_in_a_section(name):
    bad = {k: one_value_two_labels(summary(figs)) for k, figs in renderings(name).items()}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


if __name__ == "__main__":  # the collisions of every bundled representative, for a person to read
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests.conftest, run as a script

    for name in sys.argv[1:] or TRACES:
        n = 0
        for k, figs in renderings(name).items():
            figs = summary(figs)
            n += len(figs)
            for line in one_label_two_values(figs):
                print(f"{name} {k} LABEL: {line}")
            for line in one_value_two_labels(figs):
                print(f"{name} {k} VALUE: {line}")
        print(f"{name}: {n} figures")


def test_the_checks_catch_a_collision():
    """The extractor reads the issue's own examples as collisions."""
    two_values = text_figures("  step     p50 1.0 ms   GPU busy 56.0 %\nEvidence\n  ✔ GPU busy    55.1 %  < 70 %")
    assert one_label_two_values(two_values)
    two_names = text_figures("Evidence\n  waiting for other ranks 17.6 %; rank wait 17.6 %")
    assert one_value_two_labels(two_names)
    assert not one_label_two_values(text_figures("  GPU busy 56.02 %\n  GPU busy 56.0 %"))  # one value, two precisions


@pytest.mark.parametrize("name", ["kineto/hta_dlrm_ws128_2ranks", "dlrm8"])
def test_a_waiting_ranks_communication_row_is_named_in_two_parts_in_every_view(name):
    """DLRM rank 0 waits for rank 1 inside its all-to-alls: the breakdown's communication row
    (27.4 %) is the wait (2.6 %, 15.9 ms per step) plus the communication the evidence names
    (24.8 %), said with those names in text, Markdown, HTML, the app and the document."""
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    r = report(name)
    i = next(i for i, a in enumerate(r.ranks) if a.rank == 0)
    doc = {"tool": {"version": ""}, "schema": "", **r.rank_view(i).doc}
    split = doc["breakdown"]["communication_split"]
    row = doc["breakdown"]["categories"]["communication"]["pct"]
    wait, rest = split["parts"]
    assert split["pct"] == row == pytest.approx(27.4, abs=0.05)
    assert wait["pct"] == pytest.approx(2.6, abs=0.05) and rest["pct"] == pytest.approx(24.8, abs=0.05)
    assert wait["pct"] + rest["pct"] == pytest.approx(row, abs=0.011)
    assert wait["ms_per_step"] == pytest.approx(r.story.ranks[i].wait_ms_per_step, abs=0.01)  # the story's wait
    sink = next(e for e in doc["verdict"]["evidence"] if e["metric"].startswith("largest sink of step time"))
    assert sink["metric"].endswith(rest["label"]) and sink["value"] == pytest.approx(rest["pct"], abs=0.01)
    words = f"{row:.1f} % = {wait['label']} {wait['pct']:.1f} %"
    for view in (
        render_text(doc),
        markdown_text(render_markdown(doc)),
        html_text(render_html(doc)),
        overview_text(doc),
    ):
        flat = re.sub(r"\s+", " ", view)
        assert words in flat and f"+ {rest['label']} {rest['pct']:.1f} %" in flat
    main = r.to_dict()  # the headline rank (the straggler side, rank 1) waits for no one: no split to show
    assert main["breakdown"]["communication_split"] is None
