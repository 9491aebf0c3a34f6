"""Benchmark: one signature whose stamp is drawn in the record's CJK face (Noto Sans CJK SC, 16 MB,
embedded as a subset), against the same signature in a standard PDF font. Every stamp of a record is
drawn in that face (so its stamps look alike and Chinese stamps render), which cost 1.7 to 2.2 s of
wall time per signature on a loaded machine against 0.18 s with a standard font.

    python -m benchmarks.perf.signing [--signatures 7] [--baseline CHECKOUT]

In a new process (as a Celery worker or `manage.py` command meets it): one signature in a standard
font first (pyHanko's own first-use costs), then --signatures signatures with the CJK stamp, then as
many in the standard font. Each signs the same prepared record's business field (B-B, a CJK signer
name, the stamp's words in Chinese), so each does the same work. Printed: the first CJK signature of
the process (it fills the per-process font cache, `selection.certificates.signing.fonts`), the median
of the later ones, and the standard font's median, in wall and CPU seconds (on a loaded machine the
CPU seconds are the figure to compare: the wall time waits for the other processes). --baseline
times the same in another checkout (e.g. `git archive` of an older commit), in the same run.

Exits 1 when a later CJK signature's median CPU exceeds the standard font's by more than the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from weasyprint import HTML  # noqa: E402  (after the path above, as `python benchmarks/perf/signing.py` needs)

from selection.certificates import signing  # noqa: E402

BUDGET_S = 0.05  # CPU s a CJK stamp may add to a later signature (0.33 to 0.37 s before the font cache, 0.01 s now)
PASSPHRASE = "benchmark-only"
SIGNER = "张伟"
HEADING, ROLE = "已数字签名（PAdES）", "业务负责人"

# Runs in the checkout being measured, in a new process: argv = record PDF, certificate folder, font, count.
CHILD = """
import json, sys, time
from pathlib import Path
from selection.certificates import signing

pdf = Path(sys.argv[1]).read_bytes()
p12 = (Path(sys.argv[2]) / "business.p12").read_bytes()
font, count = sys.argv[3], int(sys.argv[4])
words = signing.StampWords(heading=%(heading)r, role=%(role)r)


def timed(stamp_font):
    c0, t0 = time.process_time(), time.perf_counter()
    signed = signing.sign_pdf(pdf, p12, %(passphrase)r, "business", %(signer)r, "business", "benchmark approval",
                              stamp_font=stamp_font, stamp_words=words)
    assert len(signed) > len(pdf)
    return time.perf_counter() - t0, time.process_time() - c0


standard_first = timed(None)
cjk = [timed(font) for _ in range(count)]
standard = [timed(None) for _ in range(count)]
print(json.dumps({"standard_first": standard_first, "cjk": cjk, "standard": standard}))
""" % {"heading": HEADING, "role": ROLE, "passphrase": PASSPHRASE, "signer": SIGNER}


def measure(checkout: Path, record: Path, certs: Path, font: Path, count: int) -> dict:
    """The wall and CPU seconds of each signature, in a new process of `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-c", CHILD, str(record), str(certs), str(font), str(count)]
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"signing in {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def figures(samples: dict) -> dict[str, tuple[float, float]]:
    """(wall s, CPU s): the first CJK signature, the median of the later ones and of the standard font's."""
    later = samples["cjk"][1:]
    return {
        "CJK stamp, first in process": tuple(samples["cjk"][0]),
        f"CJK stamp, median of {len(later)} later": (
            statistics.median(s[0] for s in later),
            statistics.median(s[1] for s in later),
        ),
        f"standard font, median of {len(samples['standard'])}": (
            statistics.median(s[0] for s in samples["standard"]),
            statistics.median(s[1] for s in samples["standard"]),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signatures", type=int, default=7, help="CJK signatures per process (and as many standard)")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to time the same way")
    args = parser.parse_args(argv)
    if args.signatures < 2:
        parser.error("--signatures: at least 2 (the first, then the later ones)")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        font = signing.cjk_stamp_font(folder / "fonts")
        if font is None:
            print(f"no CJK font ({signing.CJK_FACE} in {', '.join(signing.CJK_COLLECTIONS)}): nothing to measure")
            return 1
        signing.issue_dev_certificates(folder / "certs", {"business": SIGNER}, PASSPHRASE)
        html = "<h1>决策记录</h1>" + "<p>The decision text, 决策文本。</p>" * 60
        record = folder / "record.pdf"
        record.write_bytes(
            signing.prepare_signature_fields(HTML(string=html).write_pdf(), {"business": (0, 40, 60, 220, 140)})
        )
        after = figures(measure(ROOT, record, folder / "certs", font, args.signatures))
        before = (
            figures(measure(args.baseline.resolve(), record, folder / "certs", font, args.signatures))
            if args.baseline
            else None
        )

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; one signature (B-B), seconds")
    print(f"{'':<36}{'wall':>8}{'cpu':>8}" + (f"{'baseline wall':>15}{'cpu':>8}" if before else ""))
    olds = list(before.values()) if before else [None] * len(after)
    for (name, (wall, cpu)), old in zip(after.items(), olds, strict=True):
        line = f"{name:<36}{wall:>8.2f}{cpu:>8.2f}"
        if old:
            line += f"{old[0]:>15.2f}{old[1]:>8.2f}  ({old[1] / max(cpu, 1e-3):.1f}x the cpu)"
        print(line)
    later_cpu = list(after.values())[1][1]
    standard_cpu = list(after.values())[2][1]
    added = later_cpu - standard_cpu
    failed = added > BUDGET_S
    verdict = "FAIL" if failed else "OK"
    print(f"the CJK stamp adds {added:.2f} s of CPU to a later signature; budget {BUDGET_S:.2f} s: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
