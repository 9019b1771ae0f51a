#!/usr/bin/env python3
"""Turns bench/run's raw results into docs/benchmarks.md and a PNG plot.

Reads OUT/tcp.csv and OUT/rdma.csv (lines 'rep,bench,impl,transport,mode,size,connections,
metric,value'), pairs each of our cases with its baseline, and reports medians over the
repetitions, the ratio ours/baseline with its range over the repetitions, and the target.
It fails (exit 1, after writing the report) when, in the parts named by --parts, a benchmark or
baseline that bench/run runs reported nothing, a figure is not a positive number, a row has no
baseline figure, or the two sides of a pairing the tables make reported different cases. With
--quick (bench/run --quick) it expects what quick mode runs: fewer baselines, some in one mode
only, so a row lacks its baseline only where that baseline ran in the row's mode.
"""
import argparse
import collections
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = {  # (bench, impl) that bench/run runs, by part
    "tcp": [("pingpong", "coverbs"), ("pingpong", "asio"), ("stream", "coverbs"), ("stream", "asio"),
            ("echo", "coverbs"), ("echo", "asio"), ("file", "coverbs")],
    "rdma": [("pingpong", "coverbs"), ("pingpong", "ib_send_lat"), ("read", "coverbs"),
             ("read", "ib_read_lat"), ("write", "coverbs"), ("stream", "coverbs"), ("stream", "ib_write_bw"),
             ("stream", "ib_send_bw"), ("echo", "coverbs"), ("file", "coverbs"), ("verbs", "coverbs"),
             ("verbs", "raw")],
}
# bench/run --quick runs only the two perftest tools the targets name (each costs seconds).
NOT_IN_QUICK = {("read", "ib_read_lat"), ("stream", "ib_send_bw")}
# The pairings the tables make, (part, bench, baseline impl) against coverbs: both sides must
# report the same cases (size, connections, metric), or rows go missing or lose their baseline.
PAIRINGS = [("tcp", "pingpong", "asio"), ("tcp", "stream", "asio"), ("tcp", "echo", "asio"),
            ("rdma", "pingpong", "ib_send_lat"), ("rdma", "stream", "ib_write_bw")]
# The file transfer's baseline: the plain stream, one connection writing 1 MiB (bench/run runs it
# for the file transfer's row), a case our stream need not have.
FILE_BASELINE_CASE = (1048576, 1, "mib_s")
UNITS = {"allocs_per_rt": "", "allocs_per_op": "", "ns_per_op": "ns", "p50_us": "µs", "p99_us": "µs", "p999_us": "µs", "mib_s": "MiB/s", "rt_per_s": "round trips/s"}
METRIC_NAMES = {"allocs_per_rt": "heap allocations per round trip", "allocs_per_op": "heap allocations per operation",
                "ns_per_op": "time per operation", "p50_us": "p50", "p99_us": "p99", "p999_us": "p99.9", "mib_s": "bandwidth", "rt_per_s": "rate"}


def load(out, parts):
    """{key: {rep: value}} with key = (bench, impl, transport, mode, size, conns, metric)."""
    data = collections.defaultdict(dict)
    for part in parts:
        path = os.path.join(out, part + ".csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                fields = line.strip().split(",")
                if len(fields) != 9:
                    continue
                rep, bench, impl, transport, mode, size, conns, metric, value = fields
                data[(bench, impl, transport, mode, int(size), int(conns), metric)][int(rep)] = float(value)
    return data


def size_name(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def mode_name(mode):
    """'event', or 'event:1048576x8' (stream buffers other than the defaults) as 'event, 1 MiB buffers × 8'."""
    polling, _, buffers = mode.partition(":")
    if not buffers:
        return mode
    size, count = buffers.split("x")
    return f"{polling}, {size_name(int(size))} buffers × {count}"


def fmt(v):
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def meets(ratio, target):
    """Whether a ratio meets ('<=', x) or ('>=', x) as shown: rounded to the table's two decimals,
    so a 1.00 on the page meets '<= 1.0' whatever its third decimal."""
    shown = float(f"{ratio:.2f}")
    return shown <= target[1] if target[0] == "<=" else shown >= target[1]


class Table:
    def __init__(self, data):
        self.data = data
        self.rows = []
        self.missed = []  # lines for "Targets missed"
        self.unpaired = []  # (label, baseline key) of rows whose baseline has no figure
        self.section = ""

    def median(self, key):
        values = self.data.get(key)
        return statistics.median(values.values()) if values else None

    def row(self, label, ours, base=None, target=None):
        """target: ('<=', x) for latencies, ('>=', x) for rates, or None."""
        metric = ours[-1]
        name = f"{self.section}: {label}"
        o = self.median(ours)
        if o is None:
            return
        counted = metric in ("allocs_per_rt", "allocs_per_op")
        if counted:  # an absolute target, none: a repetition that allocated misses it, whatever the rest did
            o = max(self.data[ours].values())
        b = self.median(base) if base else None
        if base and b is None:
            self.unpaired.append((name, base))
        ratio = of_medians = o / b if b else None
        spread = ""
        if b:
            # Ours and the baseline ran side by side in each repetition: the ratio is the median
            # of those paired ratios, which cancels drifts of the machine between repetitions.
            per_rep = [v / self.data[base][r] for r, v in self.data[ours].items()
                       if r in self.data[base] and self.data[base][r] > 0]
            if per_rep:
                ratio = statistics.median(per_rep)
            if len(per_rep) > 1:
                spread = f" ({min(per_rep):.2f}–{max(per_rep):.2f})"
        met = "—"
        if target and ratio is None:
            # A target with nothing to measure it against is not met: the baseline failed.
            met = "**no baseline**"
            self.missed.append(f"{name}: no baseline figure, target {target[0]} {target[1]}")
        elif target:
            # The columns show medians; the ratio is the median of the paired ratios. The two
            # weigh the repetitions differently and can fall on either side of a target, with the
            # page then contradicting itself: a target is met only when both say so.
            ok, ok_medians = meets(ratio, target), meets(of_medians, target)
            met = "yes" if ok and ok_medians else "**no**" if ok == ok_medians else "**no** (split)"
            if ok != ok_medians:
                self.missed.append(f"{name}: split, median of the per-repetition ratios {ratio:.2f}, "
                                   f"ratio of the medians {of_medians:.2f}, target {target[0]} {target[1]}")
            elif not ok:
                self.missed.append(f"{name}: ratio {ratio:.2f}, target {target[0]} {target[1]}")
        if counted:
            target = ("=", 0)
            met = "yes" if o == 0 else "**no**"
            if o != 0:
                self.missed.append(f"{name}: value {o:g}, target = 0")
        tgt = f"{target[0]} {target[1]}" if target else "—"
        unit = UNITS[metric]
        self.rows.append(f"| {label} | {fmt(o)} {unit} | {fmt(b)} | "
                         f"{'—' if ratio is None else f'{ratio:.2f}'}{spread} | {tgt} | {met} |")

    def keys(self, bench, impl, transport):
        return sorted({(k[3], k[4], k[5]) for k in self.data if k[:3] == (bench, impl, transport)},
                      key=lambda t: (t[1], t[2], t[0]))


def build_tables(t):
    sections = []
    # RDMA latency: ib_send_lat polls (busy, adaptive) or sleeps on events (-e: event).
    t.rows, t.section = [], "RDMA"
    for mode, size, _ in sorted(t.keys("pingpong", "coverbs", "rdma"), key=lambda k: (k[0] != "busy", k[0], k[1])):
        pmode = "event" if mode == "event" else "poll"
        base_name = "ib_send_lat" + (" -e" if pmode == "event" else "")
        for metric, target in (("p50_us", ("<=", 1.05)), ("p99_us", ("<=", 1.2)), ("p999_us", None)):
            t.row(f"ping-pong {size_name(size)}, {mode} vs {base_name}, {METRIC_NAMES[metric]}",
                  ("pingpong", "coverbs", "rdma", mode, size, 1, metric),
                  ("pingpong", "ib_send_lat", "rdma", pmode, size, 1, metric), target=target)
    # At every size: a larger message takes other paths (and pools) than a small one.
    for mode, size, _ in t.keys("pingpong", "coverbs", "rdma"):
        t.row(f"ping-pong {size_name(size)}, {mode}, heap allocations per round trip",
              ("pingpong", "coverbs", "rdma", mode, size, 1, "allocs_per_rt"))
    for mode, size, _ in t.keys("read", "coverbs", "rdma"):
        for metric in ("p50_us", "p99_us"):
            t.row(f"read {size_name(size)}, {mode} vs ib_read_lat, {METRIC_NAMES[metric]}",
                  ("read", "coverbs", "rdma", mode, size, 1, metric),
                  ("read", "ib_read_lat", "rdma", "poll", size, 1, metric))
    # ib_write_lat times a write ping-pong (each side writes into the other's memory and polls
    # its own for the peer's write), half of it per sample: not one write's post to completion,
    # and twice it is no such time either. No perftest tool times that.
    for mode, size, _ in t.keys("write", "coverbs", "rdma"):
        for metric in ("p50_us", "p99_us"):
            t.row(f"write {size_name(size)}, {mode}, {METRIC_NAMES[metric]} "
                  "(no like-for-like baseline: ib_write_lat times a write ping-pong)",
                  ("write", "coverbs", "rdma", mode, size, 1, metric))
    sections.append(("RDMA latency (Soft-RoCE)", t.rows))
    # The async verbs layer alone (bench/verbs_ops_bench): sequential RDMA WRITEs, post to
    # completion, against a raw ibv_post_send/ibv_poll_cq loop on the same device, which spins.
    t.rows = []
    for mode, size, _ in sorted(t.keys("verbs", "coverbs", "rdma"), key=lambda k: (k[0].split("-")[0] != "busy", k[0])):
        polling, token = mode.split("-", 1)
        t.row(f"verbs: RDMA WRITE {size_name(size)}, {polling}, {token} vs raw post/poll loop",
              ("verbs", "coverbs", "rdma", mode, size, 1, "ns_per_op"), ("verbs", "raw", "rdma", "busy", size, 1, "ns_per_op"))
    for mode, size, _ in sorted(t.keys("verbs", "coverbs", "rdma")):
        polling, token = mode.split("-", 1)
        t.row(f"verbs: RDMA WRITE {size_name(size)}, {polling}, {token}, heap allocations per operation",
              ("verbs", "coverbs", "rdma", mode, size, 1, "allocs_per_op"))
    sections.append(("Async verbs layer (Soft-RoCE): one RDMA WRITE at a time", t.rows))
    t.rows = []
    # Four connections against four QPs, and one connection's large writes against one QP's.
    for mode, size, conns in t.keys("stream", "coverbs", "rdma"):
        for tool in ("ib_write_bw", "ib_send_bw") if conns > 1 else ("ib_write_bw",):
            target = (">=", 0.95) if tool == "ib_write_bw" and size >= 65536 else None
            t.row(f"stream {size_name(size)} × {conns}, {mode_name(mode)} vs {tool} -q {conns}",
                  ("stream", "coverbs", "rdma", mode, size, conns, "mib_s"),
                  ("stream", tool, "rdma", "poll", size, conns, "mib_s"), target=target)
    for mode, size, conns in t.keys("echo", "coverbs", "rdma"):
        for metric in ("rt_per_s", "p50_us", "p99_us"):
            t.row(f"echo {size_name(size)}, {conns} conn, {mode}, {METRIC_NAMES[metric]} (no baseline)",
                  ("echo", "coverbs", "rdma", mode, size, conns, metric))
    sections.append(("RDMA bandwidth and echo (Soft-RoCE)", t.rows))
    t.rows, t.section = [], "TCP"
    for _, size, _ in t.keys("pingpong", "coverbs", "tcp"):
        for metric, target in (("p50_us", ("<=", 1.0)), ("p99_us", ("<=", 1.0)), ("p999_us", None),
                               ("allocs_per_rt", None)):
            t.row(f"ping-pong {size_name(size)}, {METRIC_NAMES[metric]}", ("pingpong", "coverbs", "tcp", "-", size, 1, metric),
                  ("pingpong", "asio", "tcp", "-", size, 1, metric), target=target)
    for _, size, conns in t.keys("stream", "coverbs", "tcp"):
        t.row(f"stream {size_name(size)} × {conns}", ("stream", "coverbs", "tcp", "-", size, conns, "mib_s"),
              ("stream", "asio", "tcp", "-", size, conns, "mib_s"), target=(">=", 1.0))
    for _, size, conns in t.keys("echo", "coverbs", "tcp"):
        for metric, target in (("rt_per_s", (">=", 1.0)), ("p50_us", None), ("p99_us", ("<=", 1.0))):
            t.row(f"echo {size_name(size)}, {conns} conn, {METRIC_NAMES[metric]}",
                  ("echo", "coverbs", "tcp", "-", size, conns, metric),
                  ("echo", "asio", "tcp", "-", size, conns, metric), target=target)
    sections.append(("TCP (this machine, loopback): coverbs' TCP transport vs plain Asio", t.rows))
    # The file-transfer example (checksum, file I/O and all) against the plain stream on the
    # same transport, one connection writing 1 MiB at a time as the example's slots do.
    t.rows, t.section = [], "File transfer"
    for transport, base, base_mode, base_name in (("tcp", "asio", "-", "Asio stream 1 MiB × 1"),
                                                  ("rdma", "ib_write_bw", "poll", "ib_write_bw 1 MiB -q 1")):
        for _, size, _ in t.keys("file", "coverbs", transport):
            t.row(f"file transfer {size_name(size)} over {transport.upper()} vs {base_name}",
                  ("file", "coverbs", transport, "-", size, 1, "mib_s"),
                  ("stream", base, transport, base_mode, 1048576, 1, "mib_s"), target=(">=", 0.9))
    sections.append(("File transfer (examples/file_transfer, its default checksum XXH3-128 included)", t.rows))
    return sections


SERIES = [  # (panel, title, colour, bench, impl, transport, mode, metric); ours solid, baselines hollow
    ("lat", "coverbs RDMA busy", "#7b2cbf", "pingpong", "coverbs", "rdma", "busy", "p50_us"),
    ("lat", "coverbs RDMA event", "#2a9d2a", "pingpong", "coverbs", "rdma", "event", "p50_us"),
    ("lat", "ib\\_send\\_lat", "#3a86ff", "pingpong", "ib_send_lat", "rdma", "poll", "p50_us"),
    ("lat", "ib\\_send\\_lat -e", "#f77f00", "pingpong", "ib_send_lat", "rdma", "event", "p50_us"),
    ("lat", "coverbs TCP", "#d62828", "pingpong", "coverbs", "tcp", "-", "p50_us"),
    ("lat", "Asio TCP", "#003049", "pingpong", "asio", "tcp", "-", "p50_us"),
    ("bw", "coverbs RDMA busy", "#7b2cbf", "stream", "coverbs", "rdma", "busy", "mib_s"),
    ("bw", "coverbs RDMA event", "#2a9d2a", "stream", "coverbs", "rdma", "event", "mib_s"),
    ("bw", "ib\\_write\\_bw", "#3a86ff", "stream", "ib_write_bw", "rdma", "poll", "mib_s"),
    ("bw", "ib\\_send\\_bw", "#f77f00", "stream", "ib_send_bw", "rdma", "poll", "mib_s"),
    ("bw", "coverbs TCP", "#d62828", "stream", "coverbs", "tcp", "-", "mib_s"),
    ("bw", "Asio TCP", "#003049", "stream", "asio", "tcp", "-", "mib_s"),
]


def plot(t, out, png):
    plots = {"lat": [], "bw": []}
    for i, (panel, title, colour, bench, impl, transport, mode, metric) in enumerate(SERIES):
        # The bandwidth panel is the 4-connection stream; one connection's figures are the table's.
        points = sorted((k[4], t.median(k)) for k in t.data if k[:4] == (bench, impl, transport, mode) and k[6] == metric
                        and (panel == "lat" or k[5] > 1))
        if not points:
            continue
        path = os.path.join(out, f"series{i}.dat")
        with open(path, "w") as f:
            f.writelines(f"{s} {v}\n" for s, v in points)
        style = "dt 2" if transport == "tcp" else "dt 1"
        style += " pt 7" if impl == "coverbs" else " pt 6"
        plots[panel].append(f"'{path}' using 1:2 with linespoints lw 2 {style} lc rgb '{colour}' title '{title}'")
    script = [f"set terminal pngcairo size 1400,620 font ',10'", f"set output '{png}'",
              "set multiplot layout 1,2", "set logscale xy", "set grid", "set key outside top center horizontal",
              "set format x '%.0s%cB'", "set xlabel 'message / write size (bytes)'"]
    for panel, ylabel, title in (("lat", "one-way latency p50 (µs), log", "Ping-pong latency (half round trip)"),
                                 ("bw", "MiB/s, log", "Stream bandwidth (4 connections / QPs)")):
        script += [f"set title '{title}'", f"set ylabel '{ylabel}'"]
        if plots[panel]:
            script.append("plot " + ", ".join(plots[panel]))
        else:  # nothing reported (a failed run): an empty frame; a plot of no points fails gnuplot
            script += [f"set title '{title}: nothing reported'", "set xrange [64:4194304]", "set yrange [1:10]",
                       "plot 0.1 notitle", "set autoscale"]
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


def case_name(case):
    size, conns, metric = case
    return f"{size_name(size)} × {conns}, {METRIC_NAMES[metric]}"


def check(data, parts, unpaired, quick):
    problems = []
    # A row with no baseline figure is reported with no ratio: that run of the baseline failed.
    # Quick mode runs some baselines in one mode only (ib_send_lat without -e): there only a
    # baseline that ran in the row's mode (at other sizes or connection counts) must have it.
    ran_modes = {k[:4] for k in data}
    for label, base in unpaired:
        if base[2] in parts and (not quick or tuple(base[:4]) in ran_modes):
            problems.append(f"{label}: its baseline {base[1]} reported nothing")
    for part in parts:
        for bench, impl in EXPECTED[part]:
            if quick and (bench, impl) in NOT_IN_QUICK:
                continue
            values = [(k[6], v) for k, reps in data.items() if k[:3] == (bench, impl, part) for v in reps.values()]
            if not values:
                problems.append(f"{part}: {bench} by {impl} reported nothing")
            # A count of allocations may well be 0; every other figure is a positive time or rate.
            elif not all(math.isfinite(v) and (v > 0 or (m.startswith("allocs_per") and v == 0)) for m, v in values):
                problems.append(f"{part}: {bench} by {impl} reported a value that is not a positive number")
    # A case one side did not report makes no row (ours missing) or a row without its baseline,
    # whatever the mode: compare what each side of a pairing reported, allocation counts aside
    # (only ours and Asio count them).
    for part, bench, base in PAIRINGS:
        if part not in parts:
            continue
        cases = {impl: {(k[4], k[5], k[6]) for k in data if k[:3] == (bench, impl, part)
                        and not k[6].startswith("allocs_per")} for impl in ("coverbs", base)}
        if not cases["coverbs"] or not cases[base]:
            continue  # reported nothing at all: said above
        if bench == "stream" and FILE_BASELINE_CASE not in cases["coverbs"]:
            cases[base].discard(FILE_BASELINE_CASE)
        for impl, other in (("coverbs", base), (base, "coverbs")):
            for case in sorted(cases[impl] - cases[other]):
                problems.append(f"{part}: {bench} {case_name(case)}: reported by {impl}, not by {other}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="bench/run's output directory")
    ap.add_argument("--parts", default="all", choices=["all", "tcp", "rdma"])
    ap.add_argument("--md", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--quick", action="store_true",
                    help="bench/run --quick's results: check by quick mode's rules, leave out the analysis")
    args = ap.parse_args()
    ran = ["tcp", "rdma"] if args.parts == "all" else [args.parts]
    # Quick mode checks what this run made. A full report also takes the other part from an
    # earlier run, and checks both as strictly: a report is published only whole, made of parts
    # that finished (a part's .when is written at its end, when nothing in it failed) by full runs.
    reported = ran if args.quick else ["tcp", "rdma"]
    data = load(args.out, reported)
    t = Table(data)
    sections = build_tables(t)
    problems = check(data, reported, t.unpaired, args.quick)
    if not args.quick:
        for part in reported:
            when = os.path.join(args.out, part + ".when")
            stamp = open(when).read() if os.path.exists(when) else ""
            if "(quick)" in stamp:
                problems.append(f"{part}: its results in {args.out} are a quick run's")
            elif "finished" not in stamp:  # none, or one written when a part began (before session 58)
                problems.append(f"{part}: no finished run of this part in {args.out}")
    plot(t, args.out, args.png)
    with open(os.path.join(args.out, "machine.txt")) as f:
        machine = f.read().splitlines()
    for part in ("tcp", "rdma"):
        when = os.path.join(args.out, part + ".when")
        if os.path.exists(when):
            machine += open(when).read().splitlines()
    lines = ["# Benchmarks", "",
             "Generated by `bench/run` (do not edit by hand; the analysis comes from `bench/analysis.md`);",
             "run `scripts/build && bench/run --reps 5` to reproduce, `bench/run --help` for the options.",
             "Ours and baseline are medians over the repetitions; ours and the baseline ran interleaved,",
             "and the ratio (ours / baseline) is the median of the per-repetition ratios, their range in",
             "parentheses. A target is met only when both that ratio and the ratio of the two medians meet",
             "it, each rounded to the two decimals shown; where the two disagree the row says **no**",
             "(split) and Targets missed gives both. A row with a target and no baseline figure says",
             "**no baseline**, a miss too. Heap allocations (every malloc-family call, both sides) have",
             "an absolute target, none: the figure is the largest repetition's, and one that allocated misses.",
             "Latencies are µs: ping-pong is half a round trip (as perftest reports it), read is post to",
             "completion (as ib_read_lat), write is post to completion with no baseline (ib_write_lat times",
             "half a write ping-pong, a different thing), echo is a whole round trip. Bandwidth is MiB/s",
             "(perftest's MB/sec is 2^20 B/s). perftest's bandwidth tools poll (no -e) and keep up to 128",
             "requests per QP in flight, capped by -n: 128, 64, 5 and 5 at 4 KiB, 64 KiB, 1 MiB and 4 MiB",
             "with bench/run's counts; our stream has one write per connection in flight. Event-mode rows",
             "are held to the same busy-polling baseline.",
             "", "## Machine", ""] + [f"- {m}" for m in machine] + [
             "", f"![latency and bandwidth against message size]({os.path.basename(args.png)})", ""]
    for title, rows in sections:
        if rows:
            lines += [f"## {title}", "", "| case | ours | baseline | ratio | target | met |",
                      "|---|---:|---:|---:|---:|:---:|"] + rows + [""]
    lines += ["## Targets missed", ""]
    lines += [f"- {m}" for m in t.missed] or ["- none"]
    analysis = os.path.join(HERE, "analysis.md")
    if os.path.exists(analysis) and not args.quick:
        lines += ["", open(analysis).read().rstrip()]
    with open(args.md, "w") as f:
        f.write("\n".join(lines) + "\n")
    for p in problems:
        print(f"report.py: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
