#!/usr/bin/env python3
"""Turns bench/run's raw results into docs/benchmarks.md and a PNG plot.

Reads OUT/tcp.csv and OUT/rdma.csv (lines 'rep,bench,impl,transport,mode,size,connections,
metric,value'), pairs each of our cases with its baseline, and reports medians over the
repetitions, the ratio ours/baseline with its range over the repetitions, and the target.
With --check (bench/run --quick) it fails when a benchmark or baseline that quick mode runs
reported nothing, or a case has no baseline figure where its baseline ran in that mode.
"""
import argparse
import collections
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = {
    "tcp": [("pingpong", "coverbs"), ("pingpong", "asio"), ("stream", "coverbs"), ("stream", "asio"),
            ("echo", "coverbs"), ("echo", "asio"), ("file", "coverbs")],
    # bench/run --quick runs only the two perftest tools the targets name (each costs seconds).
    "rdma": [("pingpong", "coverbs"), ("pingpong", "ib_send_lat"), ("read", "coverbs"), ("write", "coverbs"),
             ("stream", "coverbs"), ("stream", "ib_write_bw"), ("echo", "coverbs"), ("file", "coverbs"),
             ("verbs", "coverbs"), ("verbs", "raw")],
}
UNITS = {"allocs_per_rt": "", "allocs_per_op": "", "ns_per_op": "ns", "p50_us": "µs", "p99_us": "µs", "p999_us": "µs", "mib_s": "MiB/s", "rt_per_s": "round trips/s"}
METRIC_NAMES = {"allocs_per_rt": "operator new per round trip", "allocs_per_op": "operator new per operation",
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


class Table:
    def __init__(self, data):
        self.data = data
        self.rows = []
        self.missed = []
        self.unpaired = []  # (label, baseline key) of rows whose baseline has no figure
        self.section = ""

    def median(self, key, scale=1.0):
        values = self.data.get(key)
        return statistics.median(values.values()) * scale if values else None

    def row(self, label, ours, base=None, base_scale=1.0, target=None):
        """target: ('<=', x) for latencies, ('>=', x) for rates, or None."""
        metric = ours[-1]
        o = self.median(ours)
        if o is None:
            return
        b = self.median(base, base_scale) if base else None
        if base and b is None:
            self.unpaired.append((f"{self.section}: {label}", base))
        ratio = o / b if b else None
        spread = ""
        if b:
            # Ours and the baseline ran side by side in each repetition: the ratio is the median
            # of those paired ratios, which cancels drifts of the machine between repetitions.
            per_rep = [v / (self.data[base][r] * base_scale) for r, v in self.data[ours].items()
                       if r in self.data[base] and self.data[base][r] > 0]
            if per_rep:
                ratio = statistics.median(per_rep)
            if len(per_rep) > 1:
                spread = f" ({min(per_rep):.2f}–{max(per_rep):.2f})"
        met = "—"
        if target and ratio is not None:
            ok = ratio <= target[1] if target[0] == "<=" else ratio >= target[1]
            met = "yes" if ok else "**no**"
            if not ok:
                self.missed.append((f"{self.section}: {label}", ratio, target))
        if metric in ("allocs_per_rt", "allocs_per_op"):  # an absolute target: none in steady state
            target = ("=", 0)
            met = "yes" if o == 0 else "**no**"
            if o != 0:
                self.missed.append((f"{self.section}: {label}", o, target))
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
    for mode, size, _ in t.keys("pingpong", "coverbs", "rdma"):
        if size == min(k[1] for k in t.keys("pingpong", "coverbs", "rdma")):  # the same at every size
            t.row(f"ping-pong {size_name(size)}, {mode}, operator new per round trip",
                  ("pingpong", "coverbs", "rdma", mode, size, 1, "allocs_per_rt"))
    for op, tool, scale in (("read", "ib_read_lat", 1.0), ("write", "ib_write_lat", 2.0)):
        for mode, size, _ in t.keys(op, "coverbs", "rdma"):
            base = tool if scale == 1.0 else f"2× {tool}"
            for metric in ("p50_us", "p99_us"):
                t.row(f"{op} {size_name(size)}, {mode} vs {base}, {METRIC_NAMES[metric]}",
                      (op, "coverbs", "rdma", mode, size, 1, metric),
                      (op, tool, "rdma", "poll", size, 1, metric), base_scale=scale)
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
        t.row(f"verbs: RDMA WRITE {size_name(size)}, {polling}, {token}, operator new per operation",
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
            if metric == "allocs_per_rt" and size != min(k[1] for k in t.keys("pingpong", "coverbs", "tcp")):
                continue  # the same at every size
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
        script.append("plot " + ", ".join(plots[panel]) if plots[panel] else "plot 1/0 notitle")
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


def check(data, parts, unpaired):
    problems = []
    # A case with no baseline figure although that baseline ran in its mode (at other sizes or
    # connection counts) would be reported with no ratio: that run of the baseline failed.
    # (Quick mode runs some baselines in one mode only: ib_send_lat without -e.)
    ran_modes = {k[:4] for k in data}
    for label, base in unpaired:
        if base[2] in parts and tuple(base[:4]) in ran_modes:
            problems.append(f"{label}: its baseline {base[1]} reported nothing")
    for part in parts:
        for bench, impl in EXPECTED[part]:
            values = [(k[6], v) for k, reps in data.items() if k[:3] == (bench, impl, part) for v in reps.values()]
            if not values:
                problems.append(f"{part}: {bench} by {impl} reported nothing")
            # A count of allocations may well be 0; every other figure is a positive time or rate.
            elif not all(math.isfinite(v) and (v > 0 or (m.startswith("allocs_per") and v == 0)) for m, v in values):
                problems.append(f"{part}: {bench} by {impl} reported a value that is not a positive number")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="bench/run's output directory")
    ap.add_argument("--parts", default="all", choices=["all", "tcp", "rdma"])
    ap.add_argument("--md", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--check", action="store_true", help="fail when a case that ran reported nothing")
    args = ap.parse_args()
    ran = ["tcp", "rdma"] if args.parts == "all" else [args.parts]
    # A check looks at what this run made; a report also takes the other part from an earlier run.
    data = load(args.out, ran if args.check else ["tcp", "rdma"])
    t = Table(data)
    sections = build_tables(t)
    problems = check(data, ran, t.unpaired) if args.check else []
    plot(t, args.out, args.png)
    with open(os.path.join(args.out, "machine.txt")) as f:
        machine = f.read().splitlines()
    for part in ("tcp", "rdma"):
        when = os.path.join(args.out, part + ".when")
        if os.path.exists(when):
            machine += open(when).read().splitlines()
    lines = ["# Benchmarks", "", "Generated by `bench/run` (do not edit by hand; the analysis comes from",
             "`bench/analysis.md`); run `scripts/build && bench/run` to reproduce, `bench/run --help` for",
             "the options. Ours and baseline are medians over the repetitions; ours and the baseline ran",
             "interleaved, and the ratio (ours / baseline) is the median of the per-repetition ratios, their",
             "range in parentheses.",
             "Latencies are µs: ping-pong is half a round trip (as perftest reports it), read is post to",
             "completion (as ib_read_lat), write is post to completion against twice ib_write_lat's half",
             "round trip, echo is a whole round trip. Bandwidth is MiB/s (perftest's MB/sec is 2^20 B/s).",
             "", "## Machine", ""] + [f"- {m}" for m in machine] + [
             "", f"![latency and bandwidth against message size]({os.path.basename(args.png)})", ""]
    for title, rows in sections:
        if rows:
            lines += [f"## {title}", "", "| case | ours | baseline | ratio | target | met |",
                      "|---|---:|---:|---:|---:|:---:|"] + rows + [""]
    lines += ["## Targets missed", ""]
    lines += [f"- {label}: {'ratio' if tg[0] != '=' else 'value'} {r:.2f}, target {tg[0]} {tg[1]}"
              for label, r, tg in t.missed] or ["- none"]
    analysis = os.path.join(HERE, "analysis.md")
    if os.path.exists(analysis) and not args.check:
        lines += ["", open(analysis).read().rstrip()]
    with open(args.md, "w") as f:
        f.write("\n".join(lines) + "\n")
    for p in problems:
        print(f"report.py: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
