"""Long-run mutation fuzzer of every reader: N mutants of the bundled inputs, each run through the
CLI in a subprocess under an address-space limit, classified against the contract (exit 0 with
valid output, or exit 2 with one line on stderr).

    python benchmarks/fuzz.py --mutants 2000 --out /tmp/fuzz-out        # nice it on a shared machine
    python benchmarks/fuzz.py --mutants 50 --seed 7 --formats kineto,pickle

Prints counts of clean / refused / internal error / traceback / oom / multi-line / bad-json / hang,
and writes every failing input to OUT/<class>/<n>/ with a ``repro.sh`` (the exact command). Also
runs a 20 MB gzip bomb once and reports its exit, stderr and peak RSS (``--no-bomb`` skips it).

``--semantic`` mutates meaning, not bytes: well-formed Kineto traces with a duration scaled by 1e6,
events duplicated, steps split or marked twice and overlapping, stub step markers, one GPU stream's
clock shifted, a rank's clock offset by days (``tests/fuzzing.py``, ``SEMANTIC_MUTATIONS``). Each
mutant is analyzed in this process and compared with its unmutated seed; besides crashes it reports
every run whose verdict or headline numbers changed while no new warning was printed (``silent``):

    python benchmarks/fuzz.py --semantic --mutants 2000
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzzing import ALLOWED  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import SEEDS  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import SEMANTIC_SEEDS  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import classify  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import commands_for  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import make_mutant  # noqa: E402 (after the repository root is put on sys.path)  # noqa: E402
from tests.fuzzing import run_in_process  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import semantic_baseline  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import semantic_mutant  # noqa: E402 (after the repository root is put on sys.path)
from tests.fuzzing import semantic_outcome  # noqa: E402 (after the repository root is put on sys.path)

GB = 1 << 30


# The child's peak RSS must be its own. ``ru_maxrss`` of a child forked (or vforked) from this
# process and then exec'd counts the parent's pages it shared before exec: a pytest process holding
# 1.2 GiB made ``trainscope --version`` "use" 1,234 MiB. So the command is started by a tiny
# launcher (a fresh interpreter of ~10 MiB): the launcher forks and execs the command, reaps it
# with wait4 and reports the grandchild's ru_maxrss, which then counts only the launcher's few
# pages before exec and the command's own after. The launcher also applies the address-space
# limit and the timeout, so a hung command is killed and still measured.
_LAUNCHER = r"""
import os, resource, sys, time
limit, timeout, report = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
argv = sys.argv[4:]
pid = os.fork()
if pid == 0:
    try:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.nice(5)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)
t0 = time.monotonic()
hung = False
while True:
    got, status, usage = os.wait4(pid, os.WNOHANG)
    if got:
        break
    if time.monotonic() - t0 > timeout:
        os.kill(pid, 9)
        got, status, usage = os.wait4(pid, 0)
        hung = True
        break
    time.sleep(0.01)
with open(report, "w") as f:
    f.write(f"{'hang' if hung else os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\n")
"""


def run_measured(
    cmd: list[str], as_limit: int, timeout: float, cwd: str, env: dict[str, str] | None = None
) -> tuple[int | None, str, str, int, float]:
    """Run ``cmd`` (an argv whose first item is an executable path) under an address-space limit
    (0: none): (exit code or None on timeout, stdout, stderr, the command's own peak RSS in bytes,
    seconds)."""
    with (
        tempfile.TemporaryFile() as fo,
        tempfile.TemporaryFile() as fe,
        tempfile.NamedTemporaryFile("r", suffix=".rss") as rep,
    ):
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(as_limit), str(timeout), rep.name, *cmd],
            stdout=fo,
            stderr=fe,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            check=False,
            timeout=timeout + 60,
        )
        dt = time.monotonic() - t0
        status, maxrss = (rep.read().split() + ["launcher-failed", "0"])[:2]
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
    if status == "launcher-failed":
        raise RuntimeError(f"the measuring launcher failed: {err[-500:]}")
    rc = None if status == "hang" else int(status)
    return rc, out, err, int(maxrss) * 1024, dt


def run_cli(argv: list[str], as_limit: int, timeout: float, cwd: str) -> tuple[int | None, str, str, int, float]:
    """``trainscope ARGV`` measured by :func:`run_measured`."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINSCOPE_DEBUG"}
    return run_measured([sys.executable, "-m", "trainscope", *argv], as_limit, timeout, cwd, env)


def gzip_bomb(path: str, compressed_mb: int = 20) -> None:
    """A gzip stream of zeros about ``compressed_mb`` MB long (≈ 1000× that decompressed), built
    from one repeated full-flush block so it takes a second, not a minute; no valid trailer (a
    reader must refuse it long before the end)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(compressed_mb * (1 << 20) // len(block)):
            f.write(block)


def mutant_done(n: int, mdir: str, every: int, total: int, counts: collections.Counter[str], t_start: float) -> None:
    """Mutant ``n`` is judged: its directory goes, and every ``every`` mutants a line of the counts so far."""
    shutil.rmtree(mdir, ignore_errors=True)
    if (n + 1) % every == 0:
        print(f"[{n + 1}/{total}] {dict(counts)} ({time.monotonic() - t_start:.0f} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutants", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="fuzz-out", help="folder for failing inputs (default ./fuzz-out)")
    ap.add_argument("--formats", default=",".join(sorted({s.fmt for s in SEEDS})))
    ap.add_argument("--as-limit-gb", type=float, default=4.0, help="RLIMIT_AS per run (default 4 GB)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run before it counts as a hang")
    ap.add_argument("--no-bomb", action="store_true")
    ap.add_argument("--semantic", action="store_true", help="semantic mutations; report silent verdict changes")
    ap.add_argument(
        "--mutations",
        default=None,
        help="--semantic: comma-separated mutations to draw from (default: all; rank-offset for rank directories)",
    )
    args = ap.parse_args()
    if args.semantic:
        return semantic_main(args)

    formats = set(args.formats.split(","))
    seeds = [s for s in SEEDS if s.fmt in formats]
    out_root = Path(args.out)
    counts: collections.Counter[str] = collections.Counter()
    per_fmt: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    as_limit = int(args.as_limit_gb * GB)
    max_rss = 0
    t_start = time.monotonic()
    work = tempfile.mkdtemp(prefix="trainscope-fuzz-")
    try:
        if not args.no_bomb:
            bomb = os.path.join(work, "bomb.json.gz")
            gzip_bomb(bomb)
            rc, out, err, rss, dt = run_cli(["analyze", bomb, "--format", "json", "-q"], as_limit, args.timeout, work)
            print(
                f"gzip bomb ({os.path.getsize(bomb) / 1e6:.0f} MB): exit {rc}, {dt:.1f} s, peak RSS "
                f"{rss / 2**20:.0f} MiB, stderr: {err.strip()!r}",
                flush=True,
            )
        for n in range(args.mutants):
            rnd = random.Random(f"{args.seed}:{n}")
            seed = seeds[n % len(seeds)]
            mdir = os.path.join(work, f"m{n}")
            os.mkdir(mdir)
            try:
                path = make_mutant(seed, rnd, mdir)
            except Exception as e:  # the mutator itself failed on this draw: not a finding
                counts["mutator-skip"] += 1
                print(f"#{n} mutator failed on {seed.path.name}: {type(e).__name__}: {e}", file=sys.stderr)
                shutil.rmtree(mdir, ignore_errors=True)
                continue
            for argv in commands_for(seed, os.path.basename(path), rnd):
                rc, out, err, rss, dt = run_cli(argv, as_limit, args.timeout, mdir)
                max_rss = max(max_rss, rss)
                verdict = classify(argv, rc, out, err)
                counts[verdict] += 1
                per_fmt[seed.fmt][verdict] += 1
                if verdict not in ALLOWED:
                    dest = out_root / verdict / f"{n}-{seed.fmt}"
                    dest.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, dest / os.path.basename(path))
                    (dest / "repro.sh").write_text(
                        f"# seed {seed.path.name}, mutant {n} (--seed {args.seed})\n"
                        f'cd "$(dirname "$0")" && python -m trainscope {" ".join(argv)}\n'
                    )
                    (dest / "stderr.txt").write_text(err[-20000:])
                    print(f"#{n} {seed.fmt} {verdict}: {' '.join(argv)}: {err.strip()[-300:]!r}", flush=True)
            mutant_done(n, mdir, 100, args.mutants, counts, t_start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{args.mutants} mutants, {sum(counts.values()) - counts['mutator-skip']} runs in "
        f"{time.monotonic() - t_start:.0f} s; peak RSS of any run {max_rss / 2**20:.0f} MiB"
    )
    for k in ("clean", "refused", "internal", "traceback", "oom", "multi-line", "bad-json", "hang"):
        print(f"  {k:11s} {counts.get(k, 0)}")
    for k in sorted(
        set(counts) - {"clean", "refused", "internal", "traceback", "oom", "multi-line", "bad-json", "hang"}
    ):
        print(f"  {k:11s} {counts[k]}")
    for fmt, c in sorted(per_fmt.items()):
        print(f"  {fmt:10s} {dict(c)}")
    bad = sum(v for k, v in counts.items() if k not in ALLOWED and k != "mutator-skip")
    return 1 if bad else 0


# The outcomes a semantic mutant's run is counted under, in the order the summary lists them (any
# other outcome is listed after them).
SEMANTIC_OUTCOMES = (
    "kept",
    "warned",
    "silent-verdict",
    "silent-numbers",
    "refused",
    "internal",
    "traceback",
    "oom",
    "bad-json",
    "mutator-skip",
)


def semantic_main(args) -> int:
    """``--semantic``: N semantic mutants over the seeds, each analyzed in this process; counts of
    kept / warned / silent-verdict / silent-numbers and of contract breaches (internal errors...)."""
    import json
    import signal

    counts: collections.Counter[str] = collections.Counter()
    per_mut: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    out_root = Path(args.out)
    work = tempfile.mkdtemp(prefix="trainscope-semfuzz-")
    stop: list[int] = []
    only = [m for m in (args.mutations or "").split(",") if m]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    t_start = time.monotonic()
    base: dict[int, dict] = {}
    try:
        for k, seed in enumerate(SEMANTIC_SEEDS):
            d = os.path.join(work, f"seed{k}")
            os.mkdir(d)
            argv = ["analyze", semantic_baseline(seed, d), "--format", "json", "-q"]
            rc, out, err = run_in_process(argv)
            if classify(argv, rc, out, err) != "clean":
                print(f"seed {seed.path.name} does not analyze cleanly: exit {rc}: {err.strip()[-300:]}")
                return 1
            base[k] = json.loads(out)
            shutil.rmtree(d, ignore_errors=True)
        done = 0
        for n in range(args.mutants):
            if stop:  # SIGTERM / Ctrl-C: stop after this mutant and print the counts so far
                break
            done = n + 1
            rnd = random.Random(f"semantic:{args.seed}:{n}")
            k = n % len(SEMANTIC_SEEDS)
            seed = SEMANTIC_SEEDS[k]
            mdir = os.path.join(work, f"m{n}")
            os.mkdir(mdir)
            try:
                chosen = rnd.choice(only) if only else None
                if chosen == "rank-offset" and seed.fmt != "ranks":
                    chosen = None if len(only) == 1 else rnd.choice([m for m in only if m != "rank-offset"])
                    if chosen is None:
                        shutil.rmtree(mdir, ignore_errors=True)
                        counts["mutator-skip"] += 1
                        continue
                path, mutation, what = semantic_mutant(seed, rnd, mdir, chosen)
            except (ValueError, IndexError):  # nothing to mutate in this seed (no steps, no stream)
                counts["mutator-skip"] += 1
                shutil.rmtree(mdir, ignore_errors=True)
                continue
            argv = ["analyze", path, "--format", "json", "-q"]
            t0 = time.monotonic()
            rc, out, err = run_in_process(argv)
            dt = time.monotonic() - t0
            contract = classify(argv, rc, out, err)
            if contract != "clean":
                outcome, moved = (contract if contract != "refused" else "refused"), [err.strip()[-300:]]
            else:
                outcome, moved = semantic_outcome(base[k], json.loads(out))
            counts[outcome] += 1
            per_mut[mutation][outcome] += 1
            if outcome.startswith("silent") or outcome not in ("kept", "warned", "refused"):
                dest = out_root / outcome / f"{n}"
                dest.mkdir(parents=True, exist_ok=True)
                (dest / "what.txt").write_text(f"{seed.path.name}: {what}\n" + "\n".join(moved) + "\n")
                print(f"#{n} {outcome}: {seed.path.name}: {what}: {'; '.join(moved)[:300]} ({dt:.1f} s)", flush=True)
            mutant_done(n, mdir, 25, args.mutants, counts, t_start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - t_start
    print(
        f"\n{done} semantic mutants in {took:.0f} s ({done / max(took, 1e-9):.2f} per s)"
        + (f"; stopped early (asked for {args.mutants})" if done < args.mutants else "")
    )
    for k in SEMANTIC_OUTCOMES:
        print(f"  {k:15s} {counts.get(k, 0)}")
    for k in sorted(set(counts) - set(SEMANTIC_OUTCOMES)):
        print(f"  {k:15s} {counts[k]}")
    for m, c in sorted(per_mut.items()):
        print(f"  {m:22s} {dict(c)}")
    bad = sum(v for k, v in counts.items() if k not in ("kept", "warned", "refused", "mutator-skip"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
