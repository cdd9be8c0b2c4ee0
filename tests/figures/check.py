#!/usr/bin/env python3
"""The figures the docs quote, computed again from the committed runs.

Each quote below is a piece of text as a document writes it and the run
it comes from; the check computes the same text from the run's JSON (or,
where a run's only record is its log, from the log) and fails where the
document says something else. Rounding, as docs/benchmarks.md states it
once: every figure is rounded to the nearest at the digits shown, from
the run's unrounded values as they are stored (an exact half to even; a
bound, "within 1.5%", up), and a ratio is taken between unrounded
medians.

Then coverage: every figure (a number with a unit: ms, s, GB, GiB, x, ×,
%) in the README, docs/benchmarks.md and the guide must lie in a checked
quote or table row, be a size some run was given (`size_mib`...), or be
named in settings() as no measurement (a default, an example, another
party's figure); any other fails, saying where.

    python3 tests/figures/check.py             # exit 1 on any difference
    python3 tests/figures/check.py --docs DIR  # DIR's README.md and docs/

tests/cli/figures.rs runs it.
"""

import json
import os
import re
import statistics
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = os.path.join(ROOT, "docs", "runs")
# A number with its unit; "2 × H100" (a count of things) and "80GB HBM3"
# (a GPU's model name) are no figures.
FIGURE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s?[–-]\s?\d+(?:\.\d+)?)?(?:\s?(?:ms|s|GB/s|GiB/s|GB|GiB|MiB|MB|x|%)|×(?!\s))(?![\w])(?!\s?HBM)")


def run(path):
    with open(os.path.join(RUNS, path), encoding="utf-8") as f:
        return json.load(f)


def r(value, places):
    """`value` to `places` digits, to the nearest as the run's stored value
    lies (what Python's `f"{x:.2f}"` prints: 110.965, stored a hair above,
    gives 110.97; an exact half, 0.125, goes to even, 0.12)."""
    return f"{float(value):.{places}f}"


def ceiling(value, places):
    """A bound ("within 1.5%"), rounded up to the digits shown."""
    import math
    scale = 10 ** places
    return f"{math.ceil(round(value * scale, 9)) / scale:.{places}f}"


def span(values, places, dash="–"):
    low, high = r(min(values), places), r(max(values), places)
    return low if low == high else f"{low}{dash}{high}"


def median(values):
    return statistics.median(values)


# --- the runs, read once -------------------------------------------------

def latency(path):
    """(operation, state, tool) -> median ms."""
    rows = run(path)
    return {(x["operation"], x["process_state"], x["tool"]): x["median_ms"] for x in rows}


def preflight_gap(path):
    """What the pre-flights add to a dry run: its median less that of the
    dry run with --force (no pre-flights)."""
    data = run(path)
    rows = data["figures"] if isinstance(data, dict) else data
    medians = {x["operation"]: x["median_ms"] for x in rows}
    return medians["suspend --dry-run"] - medians["suspend --dry-run --force"]


def throughput(path):
    """(size MiB, tool, direction) -> median seconds."""
    rounds = defaultdict(list)
    for x in run(path):
        rounds[(x["size_mib"], x["tool"], x["direction"])].append(x["seconds"])
    return {key: median(values) for key, values in rounds.items()}


def group_log(path, count):
    """{mode: [(suspend, resume) per round]} of `count` processes, from the
    bench's log (the run that measured 8 ended before its JSON)."""
    found = defaultdict(list)
    with open(os.path.join(RUNS, path), encoding="utf-8") as f:
        for line in f:
            if not line.startswith(f"group: {count} x ") or "round" not in line:
                continue
            for mode, suspend, resume in re.findall(r"([a-z-]+) ([0-9.]+)/([0-9.]+) s", line):
                found[mode].append((float(suspend), float(resume)))
    return found


def drain(path):
    """Medians over rounds: suspend, resume, and the slower rank's
    acknowledgement and rebuild."""
    rounds = run(path)["drained"]["rounds"]
    return {
        "suspend": median([x["suspend_s"] for x in rounds]),
        "resume": median([x["resume_s"] for x in rounds]),
        "acknowledged": median([max(x["acknowledged_ms"]) for x in rounds]),
        "rebuilt": median([max(x["rebuilt_ms"]) for x in rounds]),
    }


def shrink_one(path):
    """One process's shrink: median suspend of each (allocator, kind), and
    the floor's."""
    data = run(path)
    out = {(job, kind): median([x["suspend_s"] for x in rounds])
           for job, kinds in data["jobs"].items() for kind, rounds in kinds.items() if isinstance(rounds, list) and kind != "criu"}
    out["floor"] = median([x["suspend_s"] for x in data["floor"]])
    return out


def shrink_ranks(path):
    """Per allocator: what a drained rank copied (GiB) and reserved (GiB)."""
    data = run(path)
    return {job: {"copied": [b / 2**30 for x in rows for b in x["footprint_bytes"]],
                  "reserved": [b / 2**30 for x in rows for b in x["reserved"]]}
            for job, rows in data["jobs"].items()}


def bench_undump_s(note):
    """The undump's seconds by the inference bench's own clock, as its
    row's note says them ("undump 5.45 s of it ..."), as written."""
    return re.search(r"undump ([0-9.]+) s of it", note).group(1)


def inference(path):
    return {x["start"]: x["first_answer_s"] for x in run(path)["rows"]}


# --- what the docs quote --------------------------------------------------

def quoted(doc, template, after="", **values):
    """(doc, the text `doc` writes in `template`'s words, the text its run
    gives): `template` is the sentence with `{name}` where each figure
    goes; what the document writes there is read from it (the first such
    text after `after`, where rows of one shape repeat), and `values`
    (already rounded strings) fill the same places."""
    import string
    pattern = ""
    for literal, name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if name is not None:
            pattern += r"[0-9][0-9.,]*(?:[–-][0-9][0-9.,]*)?"
    text = text_of(doc)
    found = re.compile(pattern).search(text, max(text.find(after), 0) if after else 0)
    return doc, found.group(0) if found else f"(no text in the words of {template!r})", template.format(**values)


REL3 = "2026-11-27-release-0.3.0/"
PLUG = "2026-11-27-0.3.0-and-plugin/"
REL2 = "2026-11-24-h100-release-0.2.0/"


def quotes():
    """(document, the text as it is written there, the same text computed
    from the run), for every quote checked."""
    lat3 = latency(REL3 + "x4-a/calls/latency.json")
    lat2 = latency(REL2 + "latency.json")
    queries = [("get-state", "running"), ("restore-tid", "running"), ("get-state", "checkpointed"), ("restore-tid", "checkpointed")]
    locks = [("lock", "running"), ("unlock", "running"), ("lock", "checkpointed"), ("unlock", "checkpointed")]
    running = [(op, "running") for op in ("get-state", "restore-tid", "lock", "unlock")]
    checkpointed = [(op, "checkpointed") for op in ("get-state", "restore-tid", "lock", "unlock")]

    def ratio(table, rows, over, under):
        return [table[(op, st, over)] / table[(op, st, under)] for op, st in rows]

    def medians(table, rows, tool):
        return [table[(op, st, tool)] for op, st in rows]

    tp3 = throughput(REL3 + "x4-b/calls/throughput.json")

    def against_nvidia(size, direction):
        return 100 * (tp3[(size, "cudackpt", direction)] / tp3[(size, "nvidia", direction)] - 1)

    group8 = group_log(REL3 + "x4-b/calls/group.log", 8)
    d4 = drain(REL3 + "x4-a/drain4/drain.json")
    d2 = drain(REL3 + "x2/drain2/drain.json")
    one = shrink_one(PLUG + "x2-c/shrink/shrink.json")
    two = shrink_ranks(PLUG + "x2-a/shrink2/shrink.json")
    four = shrink_ranks(REL3 + "x4-a/drain4/shrink.json")
    served = inference(PLUG + "x2-b/disk/inference.json")
    cold = served["cold start"]
    dropped = served["undump, page cache dropped (1)"]
    warm = served["undump, images in the page cache"]
    within = max(abs(against_nvidia(size, d)) for size in (8192,) for d in ("suspend", "resume"))

    readme = "README.md"
    yield readme, "3–4 ms a call", f"{span(medians(lat3, running + checkpointed, 'cudackpt'), 0)} ms a call"
    yield readme, "Queries take 1.04–1.14x\n  the time", f"Queries take {span(ratio(lat3, queries, 'cudackpt', 'bare'), 2)}x\n  the time"
    yield readme, "lock and unlock 1.18–1.27x", f"lock and unlock {span(ratio(lat3, locks, 'cudackpt', 'bare'), 2)}x"
    yield readme, "30–34x as long on a running process", f"{span(ratio(lat3, running, 'nvidia', 'cudackpt'), 0)}x as long on a running process"
    yield readme, "278–326x on a checkpointed one\n  on a host of four H100s", f"{span(ratio(lat3, checkpointed, 'nvidia', 'cudackpt'), 0)}x on a checkpointed one\n  on a host of four H100s"
    yield readme, "(3.8–4.5x and 65–76x on a host of one", f"({span(ratio(lat2, running, 'nvidia', 'cudackpt'), 1)}x and {span(ratio(lat2, checkpointed, 'nvidia', 'cudackpt'), 0)}x on a host of one"
    yield readme, "medians of 60: 3.3–4.2 ms.", f"medians of 60: {span(medians(lat3, running + checkpointed, 'cudackpt'), 1)} ms."
    yield readme, "Queries take 1.04–1.14x the time of a bare program", f"Queries take {span(ratio(lat3, queries, 'cudackpt', 'bare'), 2)}x the time of a bare program"
    yield readme, "Lock and unlock take 1.18x on a running process, and 1.22–1.27x when\n    refused", (
        f"Lock and unlock take {span(ratio(lat3, locks[:2], 'cudackpt', 'bare'), 2)}x on a running process, and "
        f"{span(ratio(lat3, locks[2:], 'cudackpt', 'bare'), 2)}x when\n    refused")
    yield readme, "takes 110–111 ms on a running process on this host\n    (30–34x), and 1.18 s on a checkpointed one (278–326x)", (
        f"takes {span(medians(lat3, running, 'nvidia'), 0)} ms on a running process on this host\n"
        f"    ({span(ratio(lat3, running, 'nvidia', 'cudackpt'), 0)}x), and {span([m / 1000 for m in medians(lat3, checkpointed, 'nvidia')], 2)} s "
        f"on a checkpointed one ({span(ratio(lat3, checkpointed, 'nvidia', 'cudackpt'), 0)}x)")
    yield readme, "it took 13.7–13.9 ms and 236–240 ms", f"it took {span(medians(lat2, running, 'nvidia'), 1)} ms and {span(medians(lat2, checkpointed, 'nvidia'), 0)} ms"
    yield readme, (
        "the same as NVIDIA's tool to within 1.5% at 8 GiB, and faster at 1 GiB\n"
        "  (6% to suspend, 3% to resume): 4.69 s and 2.88 s for 8 GiB (NVIDIA's\n"
        "  tool 4.68 s and 2.84 s)"), (
        f"the same as NVIDIA's tool to within {ceiling(within, 1)}% at 8 GiB, and faster at 1 GiB\n"
        f"  ({r(-against_nvidia(1024, 'suspend'), 0)}% to suspend, {r(-against_nvidia(1024, 'resume'), 0)}% to resume): "
        f"{r(tp3[(8192, 'cudackpt', 'suspend')], 2)} s and {r(tp3[(8192, 'cudackpt', 'resume')], 2)} s for 8 GiB (NVIDIA's\n"
        f"  tool {r(tp3[(8192, 'nvidia', 'suspend')], 2)} s and {r(tp3[(8192, 'nvidia', 'resume')], 2)} s)")
    together = median([s for s, _ in group8["group"]])
    alone = median([s for s, _ in group8["one-by-one"]])
    yield readme, "8 × 2 GiB processes suspend together in 2.9 s, against\n  12.2 s one by one (4.2x). They resume in 3.3 s, against 7.0–7.6 s", (
        f"8 × 2 GiB processes suspend together in {r(together, 1)} s, against\n"
        f"  {r(alone, 1)} s one by one ({r(alone / together, 1)}x). They resume in "
        f"{r(median([x for _, x in group8['group']]), 1)} s, against {span([x for _, x in group8['one-by-one']], 1)} s")
    yield readme, "add 31.1 ms to a dry run on four H100s", f"add {r(preflight_gap(REL3 + 'x4-b/calls/preflight.json'), 1)} ms to a dry run on four H100s"
    nvml = run("2026-11-26-h100x4-final/2-disk-groups-drains/pre/nvml-split.json")["nvmlInit_v2"]["init"]
    yield readme, "alone took 22.4 ms on another four-H100 host, at `65a28f3`); 18.6 ms on\n  one H100 (release 0.2.0)", (
        f"alone took {r(nvml, 1)} ms on another four-H100 host, at `65a28f3`); {r(preflight_gap(REL2 + 'preflight.json'), 1)} ms on\n  one H100 (release 0.2.0)")
    groups = {(x["processes"], x["mode"], x["direction"]): x["median_s"] for x in run(PLUG + "x2-d/groups/group.json")["medians"]}
    yield readme, "4 × 2 GiB: 2.2 s against 7.8 s (3.6x)", (
        f"4 × 2 GiB: {r(groups[(4, 'group', 'suspend')], 1)} s against {r(groups[(4, 'one-by-one', 'suspend')], 1)} s "
        f"({r(groups[(4, 'one-by-one', 'suspend')] / groups[(4, 'group', 'suspend')], 1)}x)")
    yield readme, "`suspend --drain\n  --tree` 2.7 s and `resume` 2.4 s (the ranks acknowledge in 465 ms and\n  rebuild in 370 ms); two ranks on 2 × H100: 2.5 s and 1.5 s", (
        f"`suspend --drain\n  --tree` {r(d4['suspend'], 1)} s and `resume` {r(d4['resume'], 1)} s (the ranks acknowledge in {r(d4['acknowledged'], 0)} ms and\n"
        f"  rebuild in {r(d4['rebuilt'], 0)} ms); two ranks on 2 × H100: {r(d2['suspend'], 1)} s and {r(d2['resume'], 1)} s")
    yield readme, "checkpoints in 4.4 s\n  instead of 17.4 s when drained first, and in 2.5 s with expandable\n  segments, 1.07x a process", (
        f"checkpoints in {r(one[('default allocator', 'drain')], 1)} s\n  instead of {r(one[('default allocator', 'plain')], 1)} s when drained first, and in "
        f"{r(one[('expandable segments', 'drain')], 1)} s with expandable\n  segments, {r(one[('expandable segments', 'drain')] / one['floor'], 2)}x a process")
    yield readme, "a drained rank copies 6.87–6.88 GiB with the default\n  allocator and 4.51–4.52 GiB with expandable segments, of 22.6 GiB", (
        f"a drained rank copies {span(two['default allocator']['copied'] + four['default allocator']['copied'], 2)} GiB with the default\n"
        f"  allocator and {span(two['expandable segments']['copied'] + four['expandable segments']['copied'], 2)} GiB with expandable segments, of "
        f"{span(two['default allocator']['reserved'] + four['default allocator']['reserved'], 1)} GiB")
    yield readme, "6.0 s after `undump` against 142.1 s from a cold start (23.5×", (
        f"{r(dropped, 1)} s after `undump` against {r(cold, 1)} s from a cold start ({r(cold / dropped, 1)}×")

    bench = "docs/benchmarks.md"
    yield bench, "The pre-flights cost **31.1 ms** in a dry run on four GPUs", (
        f"The pre-flights cost **{r(preflight_gap(REL3 + 'x4-b/calls/preflight.json'), 1)} ms** in a dry run on four GPUs")
    yield bench, "cudackpt is within 1.5% of NVIDIA's tool at 8 GiB, and at 1 GiB\nfaster: 6% to suspend and 3% to resume.", (
        f"cudackpt is within {ceiling(within, 1)}% of NVIDIA's tool at 8 GiB, and at 1 GiB\n"
        f"faster: {r(-against_nvidia(1024, 'suspend'), 0)}% to suspend and {r(-against_nvidia(1024, 'resume'), 0)}% to resume.")
    yield bench, "| cold (empty inductor and Triton caches, page cache dropped) | 142.15 s |", (
        f"| cold (empty inductor and Triton caches, page cache dropped) | {r(cold, 2)} s |")
    yield bench, f"{r(cold / dropped, 1)}× faster than the cold start from a dropped cache, {r(cold / warm, 0)}× from a warm", (
        f"{r(cold / dropped, 1)}× faster than the cold start from a dropped cache, {r(cold / warm, 0)}× from a warm")

    # The bullets under the per-call tables.
    yield quoted(bench, "take {a}x the floor at 0.3.0\n  ({b}x at 0.2.0): about {c} ms of cudackpt's own. The\n  compatible grammar skips clap, and runs at {d}x",
                 a=span(ratio(lat3, queries, "cudackpt", "bare"), 2), b=span(ratio(lat2, queries, "cudackpt", "bare"), 2),
                 c=span([lat3[(o, t, "cudackpt")] - lat3[(o, t, "bare")] for o, t in queries], 1),
                 d=span(ratio(lat3, queries, "compat", "bare") + ratio(lat2, queries, "compat", "bare"), 2))
    yield quoted(bench, "take {a}x ({b}x at 0.2.0)", a=span(ratio(lat3, locks, "cudackpt", "bare"), 2), b=span(ratio(lat2, locks, "cudackpt", "bare"), 2))
    yield quoted(bench, "takes {a} ms on a running process on the four-GPU\n  host ({b}x cudackpt), and {c} s on a checkpointed one ({d}x). On\n  the one-GPU host of 0.2.0 it took {e} ms ({f}x) and {g}\n  ms ({h}x)",
                 a=span(medians(lat3, running, "nvidia"), 0), b=span(ratio(lat3, running, "nvidia", "cudackpt"), 0),
                 c=span([m / 1000 for m in medians(lat3, checkpointed, "nvidia")], 2), d=span(ratio(lat3, checkpointed, "nvidia", "cudackpt"), 0),
                 e=span(medians(lat2, running, "nvidia"), 1), f=span(ratio(lat2, running, "nvidia", "cudackpt"), 1),
                 g=span(medians(lat2, checkpointed, "nvidia"), 0), h=span(ratio(lat2, checkpointed, "nvidia", "cudackpt"), 0))
    pre3 = {x["operation"]: x for x in run(REL3 + "x4-b/calls/preflight.json")["figures"]}
    pre2 = {x["operation"]: x for x in run(REL2 + "preflight.json")}
    yield quoted(bench, "their spread ({a} ms against {b} ms)", a=r(pre3["suspend"]["median_ms"], 0), b=r(pre3["suspend --force"]["median_ms"], 0))
    yield quoted(bench, "In a dry run the pre-flights cost {a} ms", a=r(preflight_gap(REL2 + "preflight.json"), 1))
    yield quoted(bench, "differ by less than their spread: {a} ms against {b} ms, with p90s of\n{c} ms and {d} ms",
                 a=r(pre2["suspend"]["median_ms"], 0), b=r(pre2["suspend --force"]["median_ms"], 0),
                 c=r(pre2["suspend"]["p90_ms"], 0), d=r(pre2["suspend --force"]["p90_ms"], 0))
    yield quoted(bench, "suspend together in {a} s against {b} s one by one ({c}x), and\nresume in {d} s against {e} s ({f}x)",
                 a=r(together, 1), b=r(alone, 1), c=r(alone / together, 1), d=r(median([x for _, x in group8["group"]]), 1),
                 e=span([x for _, x in group8["one-by-one"]], 1),
                 f=r(median([x for _, x in group8["one-by-one"]]) / median([x for _, x in group8["group"]]), 1))
    g2 = {(x["processes"], x["mode"], x["direction"]): x["median_s"] for x in run(REL2 + "group.json")["medians"]}
    yield quoted(bench, "8 × 2 GiB suspend in {a} s\n({b} GiB/s), against {c} s one by one",
                 a=r(g2[(8, "group", "suspend")], 2), b=r(8 * 2 / g2[(8, "group", "suspend")], 1), c=r(g2[(8, "one-by-one", "suspend")], 1))
    tp2 = throughput(PLUG + "x2-b/throughput/throughput.json")
    gap = lambda size, d: 100 * (1 - tp2[(size, "cudackpt", d)] / tp2[(size, "nvidia", d)])
    yield quoted(bench, "faster than NVIDIA's tool by {a}% at 16 MiB\n(where the tools' own start-up shows), by {b}% at 1 GiB and by {c}% for\nthe 8 GiB resume, and slower by {d}% for the 8 GiB suspend",
                 a=span([gap(16, "suspend"), gap(16, "resume")], 0), b=span([gap(1024, "suspend"), gap(1024, "resume")], 0),
                 c=r(gap(8192, "resume"), 1), d=r(-gap(8192, "suspend"), 1))
    d2plain = run(REL3 + "x2/drain2/drain.json")["plain"]["rounds"]
    d4plain = run(REL3 + "x4-a/drain4/drain.json")["plain"]["rounds"]
    extra = [d2["suspend"] - median([x["suspend_s"] for x in d2plain]), d4["suspend"] - median([x["suspend_s"] for x in d4plain])]
    yield quoted(bench, "The drained suspend takes {a} s more than the plain one at both widths,\nof which the ranks' acknowledgement is {b} s; the resume takes {c} s\n(two ranks) and {d} s (four) more, of which the rebuild is {e} and {f} s",
                 a=span(extra, 1), b=span([d2["acknowledged"] / 1000, d4["acknowledged"] / 1000], 1),
                 c=r(d2["resume"] - median([x["resume_s"] for x in d2plain]), 1), d=r(d4["resume"] - median([x["resume_s"] for x in d4plain]), 1),
                 e=r(d2["rebuilt"] / 1000, 1), f=r(d4["rebuilt"] / 1000, 1))

    # The shrink of one process: 0.3.0's run and the earlier one the
    # PyTorch chapter quotes.
    earlier = run("2026-11-24-h100-shrink-bench/shrink.json")
    ones = run(PLUG + "x2-c/shrink/shrink.json")

    def job(data, allocator, kind, field):
        return median([x[field] for x in data["jobs"][allocator][kind]])

    floor_of = lambda data: median([x["suspend_s"] for x in data["floor"]])
    yield quoted(bench, "the goal of\n1.25× the floor is met with expandable segments ({a}×). A step with\nnothing checkpointed took {b} s",
                 a=r(job(ones, "expandable segments", "drain", "suspend_s") / floor_of(ones), 2),
                 b=span([ones["jobs"][k]["steady_step_s"] for k in ones["jobs"]], 3))
    c3 = ones["jobs"]["default allocator"]["criu"]
    yield quoted(bench, "no drain,\ndump {a} s, {b} GB of images, restore {c} s, first step {d} s;\n`CUDACKPT_DRAIN=1`, dump {e} s, {f} GB, restore {g} s, first step\n{h} s",
                 a=r(c3["plain"]["dump_s"], 2), b=r(c3["plain"]["image_bytes"] / 1e9, 2), c=r(c3["plain"]["restore_s"], 2), d=r(c3["plain"]["first_step_s"], 3),
                 e=r(c3["drain"]["dump_s"], 2), f=r(c3["drain"]["image_bytes"] / 1e9, 2), g=r(c3["drain"]["restore_s"], 2), h=r(c3["drain"]["first_step_s"], 3))
    yield quoted(bench, "is met with expandable\nsegments ({a}×). With the default allocator it is {b}×",
                 a=r(job(earlier, "expandable segments", "drain", "suspend_s") / floor_of(earlier), 2),
                 b=r(job(earlier, "default allocator", "drain", "suspend_s") / floor_of(earlier), 2))
    ce = earlier["jobs"]["default allocator"]["criu"]
    pytorch = "docs/guide/pytorch.md"
    yield quoted(pytorch, "a drained checkpoint takes {a}× the floor. With\nPyTorch's default allocator it takes {b}×",
                 a=r(job(earlier, "expandable segments", "drain", "suspend_s") / floor_of(earlier), 2),
                 b=r(job(earlier, "default allocator", "drain", "suspend_s") / floor_of(earlier), 2))
    yield quoted(pytorch, "the drain cut the dump from {a} s to {b} s, the images\nfrom {c} GB to {d} GB, and the restore from {e} s to {f} s",
                 a=r(ce["plain"]["dump_s"], 1), b=r(ce["drain"]["dump_s"], 1), c=r(ce["plain"]["image_bytes"] / 1e9, 1),
                 d=r(ce["drain"]["image_bytes"] / 1e9, 1), e=r(ce["plain"]["restore_s"], 1), f=r(ce["drain"]["restore_s"], 1))
    yield quoted(pytorch, "after 20 steps: {a} GiB allocated,\n{b} GiB reserved. One step takes {c} s",
                 a=r(job(earlier, "default allocator", "plain", "allocated") / 2**30, 1), b=r(job(earlier, "default allocator", "plain", "reserved") / 2**30, 1),
                 c=r(earlier["jobs"]["default allocator"]["steady_step_s"], 3))

    dflt, expd = earlier["jobs"]["default allocator"], earlier["jobs"]["expandable segments"]
    tens = lambda value: str(int(round(value, -1)))
    yield quoted(bench, "Emptying the\ncache gave back {a} GiB, but {b} GiB stayed",
                 a=span([x["released_bytes"] / 2**30 for x in dflt["drain"]], 1),
                 b=r((median([x["moved_bytes"] for x in dflt["drain"]]) - median([x["allocated"] for x in dflt["drain"]])) / 2**30, 1))
    yield quoted(bench, "The first\nstep costs {a} ms more with the default allocator, and {b} ms more with\nexpandable segments ({c} s and {d} s in the two rounds)",
                 a=r(1000 * (median([x["first_step_s"] for x in dflt["drain"]]) - dflt["steady_step_s"]), 0),
                 b="–".join(tens(1000 * (x["first_step_s"] - expd["steady_step_s"])) for x in sorted(expd["drain"], key=lambda x: x["first_step_s"])),
                 c=r(expd["drain"][0]["first_step_s"], 3), d=r(expd["drain"][1]["first_step_s"], 3))
    ddp = run("2026-11-24-h200x2-ddp/shrink-2ranks.json")["jobs"]
    yield quoted(bench, "the two rounds (the\nreserved bytes differed between them: {a} and {b} GiB with the default\nallocator, {c} and {d} GiB with expandable segments)",
                 a=r(max(ddp["default allocator"][0]["reserved"]) / 2**30, 1), b=r(max(ddp["default allocator"][1]["reserved"]) / 2**30, 1),
                 c=r(max(ddp["expandable segments"][0]["reserved"]) / 2**30, 1), d=r(max(ddp["expandable segments"][1]["reserved"]) / 2**30, 1))
    wide = run("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/shrink/shrink-4ranks.json")["jobs"]
    yield quoted(bench, "Each rank copies what it did with two ranks ({a} against {b} GiB, {c}\nagainst {d} GiB)",
                 a=gib(max(wide["default allocator"][0]["footprint_bytes"])), b=gib(max(ddp["default allocator"][0]["footprint_bytes"])),
                 c=gib(max(wide["expandable segments"][0]["footprint_bytes"])), d=gib(max(ddp["expandable segments"][0]["footprint_bytes"])))
    early = run("2026-11-24-h200x2-drain/bench-drain.json")["drained"]["rounds"]
    yield quoted(bench, "`bench/drain.py`: {a} ms on 2 × H200 on 2026-11-24",
                 a=r(median([max(x["acknowledged_ms"]) for x in early]), 0))
    yield quoted(bench, "at 0.3.0, {a} ms with two\nand {b} ms with four, above)", a=r(d2["acknowledged"], 0), b=r(d4["acknowledged"], 0))
    floor_ddp = run("2026-11-24-h200x2-ddp/shrink-2ranks.json")["floor"]
    yield quoted(bench, "With expandable\nsegments each rank copies {a} GiB more than the floor",
                 a=r((max(ddp["expandable segments"][0]["footprint_bytes"]) - max(floor_ddp[0]["moved_bytes"])) / 2**30, 1))

    # Snapshots a job survives (2 × H200, 2026-11-28: x2-b, and x2-c for
    # the job's own pauses).
    snap_b = run("2026-11-28-snapshots/x2-b/drain-raw.json")["snapshot_torchrun"]
    snap_c = run("2026-11-28-snapshots/x2-c/drain-raw.json")["snapshot_torchrun"]
    suite_b = json.dumps(run("2026-11-28-snapshots/x2-b/suite.json"))
    gone = re.search(r"at once after a crash \(([0-9.]+) s for its processes to go\)", suite_b).group(1)
    snaps = "docs/guide/snapshots.md"
    images = [snap_b[k]["manifest"]["image_bytes"] / 1e9 for k in ("first", "second")]
    yield quoted(snaps, "| a snapshot (`dump --drain --leave-running`, {a} GB of images) | {b} s, {c} s |\n| `undump` after the job ended | {d} s |\n"
                 "| `undump` at once after a kill -9 of the whole job | {e} s (the killed processes took {f} s to go) |",
                 a=span(images, 2), b=r(snap_b["first"]["elapsed_ms"] / 1000, 1), c=r(snap_b["second"]["elapsed_ms"] / 1000, 1),
                 d=r(snap_b["after_end"]["elapsed_ms"] / 1000, 1), e=r(snap_b["after_crash"]["elapsed_ms"] / 1000, 1), f=gone)
    yield quoted(snaps, "memory takes a while to die once killed, {a} s for a two-rank job on\nH200s", a=r(float(gone), 0))
    first_c = snap_c["first"]["manifest"]
    gpu = [p["checkpointed_bytes"] for p in first_c["processes"] if p["checkpointed_bytes"]]
    yield quoted(snaps, "it paused {a} s and {b} s at two snapshots of\n{c} s and {d} s, of which CRIU's part was {e} s and {f} s (a second run,\n`x2-c`). "
                 "Of the images, about {g} GB is the ranks' GPU memory ({h} GB\neach, once the drain had released {i} GB)",
                 a=r(snap_c["pauses_s"][0], 1), b=r(snap_c["pauses_s"][1], 1),
                 c=r(snap_c["first"]["elapsed_ms"] / 1000, 1), d=r(snap_c["second"]["elapsed_ms"] / 1000, 1),
                 e=r(first_c["timings"]["criu_ms"] / 1000, 1), f=r(snap_c["second"]["manifest"]["timings"]["criu_ms"] / 1000, 1),
                 g=r(sum(gpu) / 1e9, 1), h=span([b / 1e9 for b in gpu], 2), i=r(first_c["drain_released_bytes"] / 1e9, 2))
    # Under Slurm: the one-H200 run's snapshot, and the two-rank job's.
    with open(os.path.join(RUNS, "2026-11-29-slurm-gpu/h1-e/cudackpt.log"), encoding="utf-8") as f:
        slurm_mb = float(re.search(r"in [0-9.]+ s \(([0-9]+) MB\)", f.read()).group(1))
    yield quoted("docs/guide/slurm.md", "the drain): {a} GB for a one-rank NCCL job with DataLoader workers on\none H200, {b} GB for a two-rank",
                 a=r(slurm_mb / 1000, 1), b=r(max(images), 1))
    # Kubernetes: the undump's rate, the restore's throughput runs.
    rates = [row["gb_per_s"] for path in ("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/disk/throughput.json", PLUG + "x2-e/restore/restore.json")
             for row in run(path)["rows"] if row["way"] == "undump"]
    yield quoted("docs/guide/kubernetes.md", "(about\n{a} GB/s on the hosts here)", a=r(median(rates), 0))
    # The torch venvs CI makes from PyPI.
    venvs = run("2026-11-29-torch-venvs/sizes.json")["venvs"]
    torch_alone = sum(venvs["torch-2.11.0"]["site_packages"].values()) / 1e9
    whole = [v["whole_bytes"] / 1e9 for v in venvs.values()]
    yield quoted("docs/guide/install.md", "a torch venv\nfrom PyPI takes {a} GB", a=span(whole, 0))
    yield quoted("docs/guide/tutorial.md", "the venv takes about {a} GB", a=r(torch_alone, 1))
    yield quoted("docs/guide/tutorial.md", "# from PyPI: about {a} GB", a=r(torch_alone, 1))

    new_restore = run(PLUG + "x2-e/restore/restore.json")
    old_restore = run("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/disk/throughput.json")
    yield quoted(bench, "a target holding 8 GiB, dumped in {a} s to\n{b} GB of images", a=r(new_restore["dump"]["elapsed_ms"] / 1000, 2),
                 b=r(new_restore["image_bytes"] / 1e9, 2))
    yield quoted(bench, "A target holding 8 GiB of GPU memory, dumped in {a} s to {b} GB of\nimages", a=r(old_restore["dump"]["elapsed_ms"] / 1000, 1),
                 b=r(old_restore["image_bytes"] / 1e9, 2))
    ways = {x["way"]: median(x["seconds"]) for x in old_restore["rows"]}
    gpu_bytes = old_restore["dump"]["manifest"]["processes"][0]["checkpointed_bytes"]
    yield quoted(bench, "and both reach {a}% of the disk's\nsequential read. The rest is CRIU's restore reading the pages on one\nthread, then the driver copying the {b} GB back",
                 a=span([100 * ways["disk"] / ways["undump"], 100 * ways["disk"] / ways["criu restore"]], 0), b=r(gpu_bytes / 1e9, 1))
    yield quoted(bench, "the\ndisk itself reads at {a} GB/s, so no change to CRIU could restore these\nimages in under {b} s here",
                 a=r(old_restore["read_bytes"] / 1e9 / ways["disk"], 2), b=r(ways["disk"], 1))

    # The pre-flights on hosts of two and four GPUs (2026-11-26).
    pf = "2026-11-26-h100x2-preflight/"
    h1, h2, h2b, before = (preflight_gap(pf + k + "/preflight.json") for k in ("3-after-host1", "4-after-host2", "5-after-host2-again", "1-nvml-before"))
    state_of = lambda path: {x["operation"]: x["median_ms"] for x in run(path)["figures"]}["state"]
    nvml2 = {(x["variant"], x["step"]): x for x in run(pf + "5-after-host2-again/nvml.json")}
    handles = [x["median_ms"] for path in (pf + "3-after-host1/nvml.json", pf + "5-after-host2-again/nvml.json")
               for x in run(path) if x["step"].endswith("handle")]
    yield quoted(bench, "NVML's first touch of a GPU costs {a} ms", a=span(handles, 0))
    yield quoted(bench, "the pre-flights cost {a} ms on one host and {b} and {c} ms on another,\nwhose every figure ran slower (`state` {d} ms against {e} ms). NVML\n"
                 "itself took {f} ms to start and {g} ms to touch both GPUs",
                 a=r(h1, 1), b=r(min(h2, h2b), 1), c=r(max(h2, h2b), 1),
                 d=span([state_of(pf + k + "/preflight.json") for k in ("4-after-host2", "5-after-host2-again")], 1),
                 e=r(state_of(pf + "3-after-host1/preflight.json"), 1), f=r(nvml2[("by_bus", "load and init")]["median_ms"], 1),
                 g=r(nvml2[("parallel", "every GPU at once: handle, uuid, processes")]["median_ms"], 1))
    yield quoted(bench, "on a third 2-GPU host, they cost {a} ms", a=r(before, 1))
    four = "2026-11-26-h100x4-final/1-preflight-disk-basics-criu/pre/"
    pre4 = {x["operation"]: x["median_ms"] for x in run(four + "preflight.json")["figures"]}
    yield quoted(bench, "another four-H100 host at `65a28f3`, below, where NVML's own start alone\ntook {a} ms", a=r(nvml, 1))
    yield quoted(bench, "({a} ms on\nanother four-H100 host", a=r(preflight_gap(four + "preflight.json"), 1))
    yield quoted(bench, "pre-flights cost **{a} ms** (`suspend --dry-run` {b} ms against {c} ms\nwith `--force`; `state` {d} ms)",
                 a=r(preflight_gap(four + "preflight.json"), 1), b=r(pre4["suspend --dry-run"], 1), c=r(pre4["suspend --dry-run --force"], 1), d=r(pre4["state"], 1))
    nvml4 = {(x["variant"], x["step"]): x for x in run(four + "nvml.json")}
    yield quoted(bench, "`nvmlInit_v2` alone is above 20 ms on this host ({a} ms at best)",
                 a=r(min(x["min_ms"] for (v, step), x in nvml4.items() if step == "load and init"), 1))
    yield quoted(bench, "saves the other GPUs' {a} ms each",
                 a=span(handles + [x["median_ms"] for (v, step), x in nvml4.items() if step.endswith("handle")], 0))

    tp2h = throughput(REL2 + "throughput.json")
    cells = [100 * (tp2h[(size, "cudackpt", d)] / tp2h[(size, "nvidia", d)] - 1) for size in (16, 1024, 8192) for d in ("suspend", "resume")]
    worst = cells.pop()  # the 8 GiB resume, said apart
    spread = sorted(x["seconds"] for x in run(REL2 + "throughput.json") if (x["size_mib"], x["tool"], x["direction"]) == (8192, "cudackpt", "suspend"))
    yield quoted(bench, "cudackpt is within {a}% of NVIDIA's tool in\nevery cell but the 8 GiB resume (+{b}%; NVIDIA's tool {c}% less), medians\nof only 3 runs whose own spread ({d} s for the 8 GiB suspend)",
                 a=ceiling(max(abs(x) for x in cells), 0), b=r(worst, 1),
                 c=r(100 * (1 - tp2h[(8192, "nvidia", "resume")] / tp2h[(8192, "cudackpt", "resume")]), 1), d=span([spread[0], spread[-1]], 2))
    yield quoted(bench, "(NVIDIA's 8 GiB resume: {a} s\nhere, {b} s there)", a=r(tp3[(8192, "nvidia", "resume")], 2), b=r(tp2h[(8192, "nvidia", "resume")], 2))
    yield quoted(bench, "NVIDIA's tool takes\n{a} ms a call on the four-GPU host against {b} ms on the one-GPU host",
                 a=span(medians(lat3, running, "nvidia"), 0), b=span(medians(lat2, running, "nvidia"), 0))
    drains = run(REL3 + "x4-a/drain4/drain.json")
    yield quoted(bench, "A rank holds {a} GiB a GPU more than a plain process",
                 a=r((max(drains["drained"]["footprint_mib"]) - max(drains["plain"]["footprint_mib"])) / 1024, 1))
    yield quoted(bench, "A step with nothing checkpointed takes {a} s", a=r(earlier["jobs"]["default allocator"]["steady_step_s"], 3))
    infer = run(PLUG + "x2-b/disk/inference.json")
    yield quoted(bench, "images {a} GB, dump {b} s", a=r(infer["dump"]["manifest"]["image_bytes"] / 1e9, 2), b=r(infer["dump"]["elapsed_ms"] / 1000, 2))
    yield quoted(bench, "The disk read the same images\nin {a} s one file at a time and {b} s four at a time",
                 a=r(infer["disk_read_s"]["1"], 2), b=r(infer["disk_read_s"]["4"], 2))

    rows46, undumps46, run46 = earlier_inference()
    gpu46 = run46["dump"]["manifest"]["processes"][0]["checkpointed_bytes"]
    warm46 = undumps46["undump, images in the page cache"]["document"]
    yield quoted(bench, "The images were {a} GB ({b} GB of them the GPU memory); the dump took\n{c} s",
                 a=r(run46["dump"]["manifest"]["image_bytes"] / 1e9, 2), b=r(gpu46 / 1e9, 2), c=r(run46["dump"]["elapsed_ms"] / 1000, 2))
    yield quoted(bench, "That is {a}× faster than the cold start from a dropped cache and {b}× from\na warm one",
                 a=r(rows46["cold start"] / rows46["undump, page cache dropped, --no-read-ahead (1)"], 0),
                 b=r(rows46["cold start"] / rows46["undump, images in the page cache"], 0))
    yield quoted(bench, "as at `4c779e5` below ({a}× and {b}×)",
                 a=r(rows46["cold start"] / rows46["undump, page cache dropped, --no-read-ahead (1)"], 0),
                 b=r(rows46["cold start"] / rows46["undump, images in the page cache"], 0))
    read1, read4 = run46["disk_read_s"]["1"], run46["disk_read_s"]["4"]
    image46 = run46["dump"]["manifest"]["image_bytes"] / 1e9
    yield quoted(bench, "The disk read the same images in {a} s one file at a time ({b} GB/s)\nand {c} s four at a time ({d} GB/s), from a dropped cache. The issue's\n"
                 "goal, an undump from a dropped cache in at most 1.1 × that ({e} s)",
                 a=r(read1, 2), b=r(image46 / read1, 2), c=r(read4, 2), d=r(image46 / read4, 2), e=r(1.1 * min(read1, read4), 2))
    warm_note = next(x["note"] for x in run46["rows"] if x["start"] == "undump, images in the page cache")
    yield quoted(bench, "the undump still takes {a} s, since CRIU\ncopies the {b} GB into the new process at {c} GB/s ({d} s) and the\ndriver then copies {e} GB to the GPU ({f} s)",
                 a=bench_undump_s(warm_note), b=r(image46, 2), c=r(image46 / (warm46["phases"]["criu_memory_ms"] / 1000), 1),
                 d=r(warm46["phases"]["criu_memory_ms"] / 1000, 2), e=r(gpu46 / 1e9, 2), f=r(warm46["phases"]["gpu_restore_ms"] / 1000, 2))
    grown = [(undumps46[k]["document"]["phases"]["criu_memory_ms"] - warm46["phases"]["criu_memory_ms"]) / 1000
             for k in ("undump, page cache dropped, --no-read-ahead (1)", "undump, page cache dropped, --no-read-ahead (2)")]
    yield quoted(bench, "From a dropped cache CRIU's part grows by {a} s", a=span(grown, 1, "-"))
    ahead = [undumps46[k]["document"]["phases"]["criu_memory_ms"] / 1000 for k in ("undump, page cache dropped (1)", "undump, page cache dropped (2)")]
    without = [undumps46[k]["document"]["phases"]["criu_memory_ms"] / 1000 for k in ("undump, page cache dropped, --no-read-ahead (1)", "undump, page cache dropped, --no-read-ahead (2)")]
    yield quoted(bench, "alternated twice) | {a} s, {b} s | {c} s, {d} s |", a=r(ahead[0], 2), b=r(ahead[1], 2), c=r(without[0], 2), d=r(without[1], 2))

    # The training job to disk and back, from the GPU suite's words.
    torchrun2 = re.search(r"step 11 ([0-9.]+) s \(([0-9.]+) GB.*next GPU ([0-9.]+) s", detail("2026-11-27-h200x2-issue46/callE/suite/suite.json", "disk_torchrun")).groups()
    yield quoted(bench, "| `dump --drain` of torchrun's agent at step 11 | {a} s | {b} GB", a=torchrun2[0], b=torchrun2[1])
    yield quoted(bench, "| `undump --map` with each rank moved to the other GPU | {a} s |", a=torchrun2[2])
    wide2 = [float(x) for x in re.search(r"step 10 ([0-9.]+) s \(([0-9.]+) GB.*next GPU ([0-9.]+) s", detail("2026-11-27-h200-suite/2gpu-a/suite.json", "disk_torchrun")).groups()]
    wide4 = [float(x) for x in re.search(r"step 10 ([0-9.]+) s \(([0-9.]+) GB.*next GPU ([0-9.]+) s", detail("2026-11-27-h200-suite/4gpu/suite.json", "disk_torchrun4")).groups()]
    yield quoted(bench, "| 2 ranks, 2 × H200 | {a} s | {b} GB | {c} s |", a=r(wide2[0], 1), b=r(wide2[1], 2), c=r(wide2[2], 1))
    yield quoted(bench, "| 4 ranks, 4 × H200 | {a} s | {b} GB | {c} s |", a=r(wide4[0], 1), b=r(wide4[1], 2), c=r(wide4[2], 1))
    yield quoted(bench, "about {a} GB/s dumping and {b} GB/s undumping",
                 a=span([wide2[1] / wide2[0], wide4[1] / wide4[0]], 2), b=span([wide2[1] / wide2[2], wide4[1] / wide4[2]], 1))
    compiled = re.search(r"acknowledged in ([0-9]+) ms\).*step 14 \(([0-9.]+) s, ([0-9.]+) GB\); undump ([0-9.]+) s",
                         detail("2026-11-27-h200x2-issue46/callE/suite/suite.json", "compiled_drain")).groups()
    yield quoted(bench, "acknowledged in {a} ms with the pool kept;\n`dump --drain` at step 14 took {b} s ({c} GB, the pool shut down by the\ndrain's dump notice), `undump` {d} s",
                 a=compiled[0], b=compiled[1], c=compiled[2], d=compiled[3])
    # A snapshot's pause: x2-c's snapshots, x2-b's plain dump.
    plain_b = re.search(r"step 10 ([0-9.]+) s \(([0-9.]+) GB", detail("2026-11-28-snapshots/x2-b/suite.json", "disk_torchrun")).groups()
    for label, key, pause in (("first snapshot, at step 6", "first", 0), ("second snapshot, at step 12", "second", 1)):
        shot = snap_c[key]
        yield quoted(bench, f"| {label} | {{a}} GB | {{b}} s | {{c}} s | {{d}} s |", a=r(shot["manifest"]["image_bytes"] / 1e9, 2),
                     b=r(shot["elapsed_ms"] / 1000, 1), c=r(shot["manifest"]["timings"]["criu_ms"] / 1000, 1), d=r(snap_c["pauses_s"][pause], 1))
    yield quoted(bench, "| plain dump (the job ends), `x2-b` | {a} GB | {b} s |", a=plain_b[1], b=plain_b[0])
    yield quoted(bench, "the GPU copy itself is the\nranks' {a} GB", a=r(sum(gpu) / 1e9, 1))

    callc = {u["label"]: u["document"]["phases"]["criu_memory_ms"] / 1000 for u in run("2026-11-27-h200x2-issue46/callC/inference/inference.json")["undumps"]}
    yield quoted(bench, "one each, the read-ahead first) | {a} s | {b} s |", a=r(callc["undump, page cache dropped"], 2),
                 b=r(callc["undump, page cache dropped, --no-read-ahead"], 2))
    diag = "2026-11-26-h100x4-suite/3-two-nodes-diagnosed/"
    two_h100, four_h100 = (drain(diag + f"bench-drain-{n}ranks.json") for n in (2, 4))
    yield quoted(bench, "acknowledge in {a} ms (the slower rank's median in\n`bench/drain.py`",
                 a=span([two_h100["acknowledged"], four_h100["acknowledged"], median([max(x["acknowledged_ms"]) for x in early])], 0))
    yield quoted(bench, "{a} ms with two ranks\nand {b} ms with four on 4 × H100 on 2026-11-26",
                 a=r(two_h100["acknowledged"], 0), b=r(four_h100["acknowledged"], 0))
    # The CPU machine's runs (2026-11-26, the fake driver).
    cpu = "2026-11-26-cpu-disk/"
    tiny = {x["start"]: x for x in run(cpu + "inference-tiny-cpu.json")["rows"]}
    with open(os.path.join(RUNS, cpu + "inference.txt"), encoding="utf-8") as f:
        tiny_images, tiny_dump = re.search(r"images ([0-9.]+) GB, dump ([0-9.]+) s", f.read()).groups()
    undump_of = lambda row: bench_undump_s(row["note"])
    yield quoted(bench, "| cold (empty inductor cache, page cache dropped) | {a} s | compiling |", a=r(tiny["cold start"]["first_answer_s"], 2))
    yield quoted(bench, "| undump, page cache dropped | {a} s | undump {b} s |", after="The server, CPU", a=r(tiny["undump, page cache dropped"]["first_answer_s"], 2),
                 b=undump_of(tiny["undump, page cache dropped"]))
    yield quoted(bench, "| undump, images in the page cache | {a} s | undump {b} s |", after="The server, CPU", a=r(tiny["undump, images in the page cache"]["first_answer_s"], 2),
                 b=undump_of(tiny["undump, images in the page cache"]))
    yield quoted(bench, "The images were {a} GB (the Python process and torch's libraries); the\ndump took {b} s", a=tiny_images, b=tiny_dump)
    cpu_restore = run(cpu + "throughput-cpu-2048.json")
    yield quoted(bench, "memory (images {a} GB)", a=r(cpu_restore["image_bytes"] / 1e9, 2))
    labels = {"disk": "the disk, every image file once, 16 MiB at a time", "undump": "`cudackpt undump`",
              "criu restore": "plain `criu restore` (cudackpt as its action script)"}
    for x in cpu_restore["rows"]:
        yield quoted(bench, f"| {labels[x['way']]} | {{a}} | {{b}} |", after="The restore on the same CPU machine", a=r(median(x["seconds"]), 2),
                     b=r(cpu_restore["read_bytes"] / 1e9 / median(x["seconds"]), 2))

    # The PyTorch chapter's findings.
    yield quoted(pytorch, "The first step pays for\nthat: {a} ms more here with the default allocator, and {b} ms more with\nexpandable segments",
                 a=r(1000 * (median([x["first_step_s"] for x in dflt["drain"]]) - dflt["steady_step_s"]), 0),
                 b="–".join(tens(1000 * (x["first_step_s"] - expd["steady_step_s"])) for x in sorted(expd["drain"], key=lambda x: x["first_step_s"])))
    forced, refused, dumped, images, restored = said("2026-11-24-h100-criu-pytorch/suite-4a8a71a.json",
        r"forced: dump failed after [0-9.]+ s and ([0-9.]+) GB of images; refused at pre-dump in ([0-9.]+) s.*dumped at step [0-9]+ in ([0-9.]+) s \(([0-9.]+) GB, drained\), restored in ([0-9.]+) s")
    yield quoted(pytorch, "suspended and {a} GB of images written.\n  - Refused at pre-dump, CRIU stopped in {b} s", a=r(float(forced), 1), b=refused)
    yield quoted(pytorch, "the dump took {a} s ({b} GB, drained) and the restore\n    {c} s", a=dumped, b=r(float(images), 1), c=restored)
    yield quoted(pytorch, "a pre-dump refusal stops CRIU in about\n  {a} s", a=r(float(refused), 1))
    yield quoted(pytorch, "`cudackpt dump`\n  refused it in {a} s", a=said("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/disk/inference.log", r"dump \(plain\): exit 8 in ([0-9.]+) s")[0])
    uring = said("2026-11-27-h200-suite/1gpu-a/suite.json", r"no_io_uring: dumped in ([0-9.]+) s \(([0-9.]+) GB\), restored in ([0-9.]+) s")
    yield quoted(pytorch, "Measured (`criu_torchrun`, one H200, 2026-11-27): the dump took {a} s ({b} GB) and the restore\n  {c} s",
                 a=uring[0], b=r(float(uring[1]), 1), c=uring[2])

    # CRIU's chapter: the plugin's tree of 16 against CRIU's own plugin.
    criu_doc = "docs/guide/criu.md"
    bench_of = lambda call: {(m["config"], m["processes"]): m for m in run(PLUG + call + "/plugin-bench/criu_plugin.json")["medians"]}
    x2e, h1b, h1e = bench_of("x2-e"), bench_of("h1-b"), bench_of("h1-e")
    yield quoted(criu_doc, "CRIU dumped in\n{a} s and restored in {b} s through cudackpt's plugin, against {c} s and\n{d} s through CRIU's own plugin running cudackpt, and {e} s and {f} s\nrunning NVIDIA's tool",
                 a=r(x2e[("cudackpt-plugin", 16)]["dump_s"], 1), b=r(x2e[("cudackpt-plugin", 16)]["restore_s"], 1),
                 c=r(x2e[("criu+cudackpt", 16)]["dump_s"], 1), d=r(x2e[("criu+cudackpt", 16)]["restore_s"], 1),
                 e=r(x2e[("criu+nvidia", 16)]["dump_s"], 1), f=r(x2e[("criu+nvidia", 16)]["restore_s"], 1))
    later = (h1b, h1e)
    yield quoted(criu_doc, "({a} s and {b} s against {c} s and {d} s)",
                 a=span([b[("cudackpt-plugin", 16)]["dump_s"] for b in later], 1), b=span([b[("cudackpt-plugin", 16)]["restore_s"] for b in later], 1),
                 c=span([b[("criu+cudackpt", 16)]["dump_s"] for b in later], 1), d=span([b[("criu+cudackpt", 16)]["restore_s"] for b in later], 1))
    own1, own16 = h1e[("cudackpt-plugin", 1)]["own_ms_per_process"], h1e[("cudackpt-plugin", 16)]["own_ms_per_process"] * 16
    yield quoted(criu_doc, "was {a} ms for one process and {b} ms for 16", a=r(own1, 0), b=tens(own16))
    v4 = said(PLUG + "h1-b/plugin-bench/hook-lines/cudackpt-plugin-16-dump-1.log", r"checkpoint: 16 processes in ([0-9.]+) ms,\s+([0-9.]+) ms")
    yield quoted(criu_doc, "`cudackpt: checkpoint: 16 processes in {a} ms,\n  {b} ms of it the driver's calls", a=v4[0], b=v4[1])

    # The disk chapter's round of proofs.
    disk_doc = "docs/guide/disk.md"
    yield quoted(disk_doc, "its first\nanswer {a} s after an undump from a dropped page cache against {b} s cold",
                 a=r(tiny["undump, page cache dropped"]["first_answer_s"], 1), b=r(tiny["cold start"]["first_answer_s"], 0))
    round_trip = said("2026-11-26-h100x4-final/2-disk-groups-drains/suiteC/suite.json", r"\"dump ([0-9.]+) s \([0-9.]+ GB, CRIU 4.2\), undump ([0-9.]+) s, data intact")
    yield quoted(disk_doc, "(dump {a} s, undump {b} s, data intact)", a=round_trip[0], b=round_trip[1])
    yield quoted(disk_doc, "back at {a} GB/s, as fast as plain `criu restore` ({b} GB/s), on a disk\nthat reads {c} GB/s",
                 a=r(old_restore["read_bytes"] / 1e9 / ways["undump"], 2), b=r(old_restore["read_bytes"] / 1e9 / ways["criu restore"], 2),
                 c=r(old_restore["read_bytes"] / 1e9 / ways["disk"], 2))
    yield quoted(disk_doc, "an earlier run at `4c779e5` gave {a} s, {b} s and {c} s",
                 a=r(rows46["undump, page cache dropped, --no-read-ahead (1)"], 1), b=r(rows46["undump, images in the page cache"], 1), c=r(rows46["cold start"], 1))
    phases46 = [undumps46[k]["document"]["phases"] for k in ("undump, page cache dropped, --no-read-ahead (1)", "undump, page cache dropped, --no-read-ahead (2)",
                                                              "undump, images in the page cache")]
    yield quoted(disk_doc, "CRIU's memory restore\n{a} s, the driver's GPU restore {b} s for {c} GB",
                 a=span([x["criu_memory_ms"] / 1000 for x in phases46], 1), b=span([x["gpu_restore_ms"] / 1000 for x in phases46], 1), c=r(gpu46 / 1e9, 1))
    yield quoted(disk_doc, "--drain` in {a} s ({b} GB) and came back onto the swapped GPUs in {c} s", a=torchrun2[0], b=torchrun2[1], c=torchrun2[2])

    # Distributed jobs: the two-rank drain on 2 × H200 (2026-11-24), the
    # single process's drain across the suite's runs, two nodes kept.
    dist_doc = "docs/guide/distributed.md"
    h200 = "2026-11-24-h200x2-drain/"
    sus, a1, a2, res, reb, fr, b0, a0, b1, a1bw = said(h200 + "suite-run2.json",
        r"suspend --drain ([0-9.]+) s \(acks \[([0-9]+), ([0-9]+)\] ms\), resume ([0-9.]+) s \(rebuilds \[([0-9]+), [0-9]+\] ms\); freed \[([0-9]+), [0-9]+\] MiB; "
        r"bus bandwidth GB/s before/after \[\[([0-9.]+), ([0-9.]+)\], \[([0-9.]+), ([0-9.]+)\]\]")
    yield quoted(dist_doc, "took\n{a} s (the two ranks acknowledged in {b} and {c} ms) and freed {d} MiB\non each GPU; `resume` took {e} s (each\nrank rebuilt in {f} ms); "
                 "the bus bandwidth of a 256 MiB all-reduce was\n{g} and {h} GB/s before (rank 0, rank 1), {i} and {j} GB/s after",
                 a=sus, b=a1, c=a2, d=f"{int(fr):,}", e=res, f=reb, g=b0, h=b1, i=a0, j=a1bw)
    yield quoted(dist_doc, "without a drain) all-reduces at {a} GB/s", a=said(h200 + "suite-run1.json", r"bus bandwidth over sockets: \[([0-9.]+),")[0])
    bench24 = run(h200 + "bench-drain.json")
    drained24 = drain(h200 + "bench-drain.json")
    plain24 = bench24["plain"]["rounds"]
    yield quoted(dist_doc, "`NCCL_NVLS_ENABLE=0`, 2 GiB held a rank, {a} GiB on each GPU with NCCL's\nbuffers)", a=r(max(bench24["drained"]["footprint_mib"]) / 1024, 1))
    yield quoted(dist_doc, "the drained round trip took {a} s + {b} s against {c} s +\n{d} s for a plain suspend and resume of two processes holding the same\n2 GiB ({e} GiB on each GPU), the slower rank acknowledging in {f} ms",
                 a=r(drained24["suspend"], 2), b=r(drained24["resume"], 2), c=r(median([x["suspend_s"] for x in plain24]), 2),
                 d=r(median([x["resume_s"] for x in plain24]), 2), e=r(max(bench24["plain"]["footprint_mib"]) / 1024, 1), f=r(drained24["acknowledged"], 0))
    singles = []
    for top, _, files in os.walk(RUNS):
        for name in files:
            if name == "suite.json":
                with open(os.path.join(top, name), encoding="utf-8") as f:
                    singles += [int(x) for x in re.findall(r"drained in ([0-9]+) ms, rebuilt in [0-9]+ ms, data right", f.read())]
    yield quoted(dist_doc, "the GPU suite's runs (H100 and H200, 2026-11-26 to 2026-11-28), a PyTorch process with the client\ndrained in {a} ms", a=span(singles, 0))
    kept = said("2026-11-26-h100x4-suite/4-groups-criu-two-nodes/suite.json",
                r"ddp: together: suspend --drain per node \['([0-9.]+)', '([0-9.]+)'\] s .*?resume ([0-9.]+) s .*?staggered: suspend --drain per node \['([0-9.]+)', '[0-9.]+'\] s .*?resume ([0-9.]+) s"
                r".*?fsdp2_hsdp: together: suspend --drain per node \['([0-9.]+)', '([0-9.]+)'\] s .*?resume ([0-9.]+) s .*?staggered: suspend --drain per node \['([0-9.]+)', '[0-9.]+'\] s .*?resume ([0-9.]+) s")
    k = [float(x) for x in kept]
    yield quoted(dist_doc, "each node's `suspend --drain` took {a} s\nand `resume` {b} s; with the second node's cudackpt 4 s after the\nfirst's, the first node's suspend took {c} s (its ranks acknowledged\n"
                 "once the second node was asked) and the job's resume {d} s",
                 a=span([k[0], k[1], k[5], k[6]], 1), b=span([k[2], k[7]], 1), c=span([k[3], k[8]], 1), d=span([k[4], k[9]], 1))
    yield quoted(dist_doc, "with it kept, a compiled\ntwo-rank job acknowledged in {a} s on 2 × H200", a=r(int(compiled[0]) / 1000, 2))

    among, median_ms = said("2026-11-23-h100-issue12/suite.json", r"([0-9]+) processes, 1 CUDA: median ([0-9]+) ms")
    yield quoted(bench, "`ps` among {a} processes (one of them a CUDA process) took a median of\n{b} ms", a=f"{int(among):,}", b=median_ms)

    disk = "docs/guide/disk.md"
    yield disk, "answered 6.0 s after an undump from a dropped page\ncache and 4.4 s from a warm one, against 142.1 s for a cold start (23.5×\nand 32×", (
        f"answered {r(dropped, 1)} s after an undump from a dropped page\ncache and {r(warm, 1)} s from a warm one, against {r(cold, 1)} s for a cold start ({r(cold / dropped, 1)}×\n"
        f"and {r(cold / warm, 0)}×")


def latency_table(path, state_label):
    """The rows of benchmarks.md's per-call table from a latency run."""
    table = latency(path)
    rows = []
    for op, st in [("get-state", "running"), ("restore-tid", "running"), ("lock", "running"), ("unlock", "running"),
                   ("get-state", "checkpointed"), ("restore-tid", "checkpointed"), ("lock", "checkpointed"), ("unlock", "checkpointed")]:
        bare = table[(op, st, "bare")]
        label = op + (" (refused)" if st == "checkpointed" and op in ("lock", "unlock") else "")
        cells = [label, st, r(bare, 2)]
        for tool in ("cudackpt", "compat"):
            cells.append(f"{r(table[(op, st, tool)], 2)} ({r(table[(op, st, tool)] / bare, 2)}x)")
        cells.append(r(table[(op, st, "nvidia")], 2))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def throughput_table(path, sizes):
    table = throughput(path)
    rows = []
    for size in sizes:
        label = f"{size // 1024} GiB" if size >= 1024 else f"{size} MiB"
        cells = [label]
        for direction in ("suspend", "resume"):
            seconds = table[(size, "cudackpt", direction)]
            rate = f" ({r(size / 1024 / seconds, 2)} GiB/s)" if size >= 1024 else ""
            cells.append(f"{r(seconds, 3)}{rate}")
        cells += [r(table[(size, "nvidia", d)], 3) for d in ("suspend", "resume")]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def preflight_table(path):
    data = run(path)
    rows = data["figures"] if isinstance(data, dict) else data
    return [f"| {x['operation']} | {r(x['median_ms'], 2)} | {r(x['min_ms'], 2)} | {r(x['p90_ms'], 2)} | {x['runs']} |"
            for x in rows if x["operation"] != "nvml"]


def group_table(path):
    """benchmarks.md's groups table: per count, group and one-by-one
    medians with the speedups, and NVIDIA's one by one."""
    data = run(path)
    m = {(x["processes"], x["mode"], x["direction"]): x["median_s"] for x in data["medians"]}
    rows = []
    for count in data["counts"]:
        gs, os_, gr, or_ = (m[(count, mode, d)] for mode, d in
                            (("group", "suspend"), ("one-by-one", "suspend"), ("group", "resume"), ("one-by-one", "resume")))
        ns, nr = m[(count, "nvidia-one-by-one", "suspend")], m[(count, "nvidia-one-by-one", "resume")]
        rows.append(f"| {count} | {r(gs, 2)} | {r(os_, 2)} | {r(os_ / gs, 2)}x | {r(gr, 2)} | {r(or_, 2)} | {r(or_ / gr, 2)}x | {r(ns, 2)} / {r(nr, 2)} |")
    return rows


def group_log_table(path):
    """The 4 × H100 groups table, from the bench's log: each count's rounds."""
    rows = []
    for count in (1, 8):
        found = group_log(path, count)
        rounds = len(found["group"])
        def cell(mode, which):
            values = [pair[which] for pair in found[mode]]
            return span(values, 2, "–") if rounds > 2 else ", ".join(r(v, 2) for v in values)
        rows.append(f"| {count} ({rounds} rounds) | {cell('group', 0)} | {cell('one-by-one', 0)} | {cell('group', 1)} | "
                    f"{cell('one-by-one', 1)} | {cell('nvidia-one-by-one', 0)} / {cell('nvidia-one-by-one', 1)} |")
    return rows


def drain_rows(path, host, ranks):
    data = run(path)
    drained = drain(path)
    plain = data["plain"]["rounds"]
    footprint = lambda part: f"{max(part['footprint_mib']):,}"
    return [
        f"| {host} | drained {ranks} ranks | {r(drained['suspend'], 3)} | {r(drained['resume'], 3)} | {footprint(data['drained'])} | "
        f"{r(drained['acknowledged'], 0)} ms | {r(drained['rebuilt'], 0)} ms |",
        f"| {host} | plain, same held memory | {r(median([x['suspend_s'] for x in plain]), 3)} | {r(median([x['resume_s'] for x in plain]), 3)} | "
        f"{footprint(data['plain'])} | | |",
    ]


def inference_rows(path):
    data = run(path)
    rows = {x["start"]: x for x in data["rows"]}
    out = []
    for label in ("undump, page cache dropped (1)", "undump, page cache dropped (2)"):
        note = rows[label]["note"]
        undump, memory, gpu = (re.search(pattern, note).group(1) for pattern in
                               (r"undump ([0-9.]+) s", r"criu memory ([0-9.]+) s", r"gpu restore ([0-9.]+) s"))
        out.append(f"| {label} | {r(rows[label]['first_answer_s'], 2)} s | undump {undump} s (CRIU's memory {memory} s, GPU restore {gpu} s) |")
    warm = rows["undump, images in the page cache"]
    out.append(f"| undump, images in the page cache | {r(warm['first_answer_s'], 2)} s | undump {re.search(r'undump ([0-9.]+) s', warm['note']).group(1)} s |")
    return out


def gib(value):
    """Bytes as GiB to three significant digits (2.50, 21.5), as the shrink
    tables write them."""
    g = value / 2**30
    return r(g, 2) if g < 10 else r(g, 1)


def shrink_one_table(path):
    data = run(path)
    floor = median([x["suspend_s"] for x in data["floor"]])
    rows = []
    for job, kinds in data["jobs"].items():
        for kind, command in (("plain", "`suspend`"), ("drain", "`suspend --drain`")):
            rounds = kinds[kind]
            suspend = median([x["suspend_s"] for x in rounds])
            rows.append(f"| {job}, {command} | {gib(median([x['allocated'] for x in rounds]))} GiB | "
                        f"{gib(median([x['reserved'] for x in rounds]))} GiB | {gib(median([x['moved_bytes'] for x in rounds]))} GiB | "
                        f"{r(suspend, 2)} s | {r(suspend / floor, 2)} | {r(median([x['resume_s'] for x in rounds]), 2)} s | "
                        f"{r(median([x['first_step_s'] for x in rounds]), 3)} s |")
    f = data["floor"]
    rows.append(f"| floor: 2.5 GiB of live tensors, nothing else | {gib(median([x['allocated'] for x in f]))} GiB | "
                f"{gib(median([x['reserved'] for x in f]))} GiB | {gib(median([x['moved_bytes'] for x in f]))} GiB | {r(floor, 2)} s | 1.00 | "
                f"{r(median([x['resume_s'] for x in f]), 2)} s | |")
    return rows


def shrink_ranks_table(path):
    """A shrink table of N ranks: each allocator's bytes a rank and the
    group's times, medians over the rounds, against the floor's."""
    data = run(path)
    ranks = data["ranks"]
    floor_s = median([x["suspend_s"] for x in data["floor"]])
    rows = []
    for job, rounds in data["jobs"].items():
        m = lambda field: median([x[field] for x in rounds])
        most = lambda field: median([max(x[field]) for x in rounds])
        rows.append(f"| {job} | {gib(most('allocated'))} GiB | {gib(most('reserved'))} GiB | {gib(most('footprint_bytes'))} GiB | "
                    f"{r(m('suspend_s'), 2)} s | {r(m('suspend_s') / floor_s, 2)} | {r(m('resume_s'), 2)} s | "
                    f"{r(m('step_before_s'), 3)} s | {r(m('first_step_s'), 3)} s |")
    allocated = max(b for rounds in data["jobs"].values() for x in rounds for b in x["allocated"])
    moved = max(b for x in data["floor"] for b in x["moved_bytes"])
    rows.append(f"| floor ({ranks} processes) | {gib(allocated)} GiB | {gib(allocated)} GiB | {gib(moved)} GiB | "
                f"{r(floor_s, 2)} s | 1.00 | {r(median([x['resume_s'] for x in data['floor']]), 2)} s | | |")
    return rows


def pytorch_table(path):
    """The PyTorch chapter's shorter table of the same run, to a tenth."""
    data = run(path)
    rows = []
    for label, allocator, kind in (("`suspend`", "default allocator", "plain"), ("`suspend --drain`", "default allocator", "drain"),
                                   ("`suspend --drain`, `expandable_segments:True`", "expandable segments", "drain")):
        rounds = data["jobs"][allocator][kind]
        rows.append(f"| {label} | {r(median([x['moved_bytes'] for x in rounds]) / 2**30, 1)} GiB | "
                    f"{r(median([x['suspend_s'] for x in rounds]), 1)} s | {r(median([x['resume_s'] for x in rounds]), 1)} s | "
                    f"{r(median([x['first_step_s'] for x in rounds]), 3)} s |")
    f = data["floor"]
    rows.append(f"| the floor: 2.5 GiB of live tensors, nothing else | {r(median([x['moved_bytes'] for x in f]) / 2**30, 1)} GiB | "
                f"{r(median([x['suspend_s'] for x in f]), 1)} s | {r(median([x['resume_s'] for x in f]), 1)} s | |")
    return rows


RESTORE_LABELS = {
    "disk": "the disk, every image file once, 16 MiB at a time",
    "undump": "`cudackpt undump` (to the target's data checked back)",
    "criu restore": "plain `criu restore` (cudackpt as its action script)",
}


def restore_table(path):
    """The restore's throughput: each way's median seconds and its rate
    over the bytes read."""
    data = run(path)
    return [f"| {RESTORE_LABELS[x['way']]} | {r(median(x['seconds']), 2)} | {r(data['read_bytes'] / 1e9 / median(x['seconds']), 2)} |"
            for x in data["rows"]]


def nvml_table():
    """The NVML steps on 4 × H100 (2026-11-26): the split run's start, and
    the variants' first handles and parallel look."""
    four = "2026-11-26-h100x4-final/1-preflight-disk-basics-criu/pre/"
    split = run("2026-11-26-h100x4-final/2-disk-groups-drains/pre/nvml-split.json")
    steps = {(x["variant"], x["step"]): x for x in run(four + "nvml.json")}
    first_handles = [split["nvmlInit_v2"]["gpu0_handle"], steps[("by_bus", "first GPU by bus id: handle")]["median_ms"]]
    return [
        f"| `dlopen(\"libnvidia-ml.so.1\")` | {r(split['nvmlInit_v2']['dlopen'], 1)} |",
        f"| `nvmlInit_v2` (attaches every GPU) | {r(split['nvmlInit_v2']['init'], 1)} |",
        f"| `nvmlInitWithFlags(NO_ATTACH)` | {r(split['no_attach']['init'], 1)} |",
        f"| first handle of a GPU after `nvmlInit_v2` | {span(first_handles, 1)} |",
        f"| the four GPUs' handles, UUIDs and processes, at once | {r(steps[('parallel', 'every GPU at once: handle, uuid, processes')]['median_ms'], 1)} |",
    ]


def earlier_inference():
    """The issue-46 run of the inference server (2 × H200, `4c779e5`):
    its rows by label, its undumps' phases by label, the run itself."""
    data = run("2026-11-27-h200x2-issue46/callD/inference/inference.json")
    rows = {x["start"]: x["first_answer_s"] for x in data["rows"]}
    undumps = {u["label"]: u for u in data["undumps"]}
    return rows, undumps, data


def earlier_inference_tables():
    rows, undumps, data = earlier_inference()
    notes = {x["start"]: x["note"] for x in data["rows"]}
    plain = ("undump, page cache dropped, --no-read-ahead (1)", "undump, page cache dropped, --no-read-ahead (2)", "undump, images in the page cache")
    # The bench's own clock around the undump, as its row says it.
    seconds = lambda label: float(bench_undump_s(notes[label]))
    table = [f"| cold (empty inductor and Triton caches, page cache dropped) | {r(rows['cold start'], 2)} s | compiling |"]
    for label, shown in zip(plain, ("undump, page cache dropped (1)", "undump, page cache dropped (2)", "undump, images in the page cache")):
        table.append(f"| {shown} | {r(rows[label], 2)} s | undump {r(seconds(label), 2)} s |")
    phases = [("cudackpt's checks before CRIU", "checks_ms"), ("CRIU to its post-restore scripts (the tree and its memory)", "criu_memory_ms"),
              ("CRIU on to its post-resume scripts", "criu_resume_ms"), ("the action script's GPU restore (the driver copying 3.11 GB back)", "gpu_restore_ms"),
              ("after CRIU", "after_criu_ms")]
    for name, key in phases:
        table.append(f"| {name} | " + " | ".join(f"{r(undumps[label]['document']['phases'][key] / 1000, 2)} s" for label in plain) + " |")
    table.append("| the server's first answer after the undump | " + " | ".join(f"{r(rows[label] - seconds(label), 2)} s" for label in plain) + " |")
    return table


def detail(path, name):
    """What the GPU suite said of a scenario (its own rounding), from its
    suite.json."""
    return next(x["detail"] for x in run(path)["results"] if x["name"] == name)


def said(path, pattern):
    """The figures a run's record says in words (a suite's detail, a
    bench's log line): `pattern`'s groups, found in the file's text."""
    with open(os.path.join(RUNS, path), encoding="utf-8") as f:
        found = re.search(pattern, f.read())
    if not found:
        raise SystemExit(f"{path} does not say {pattern!r}")
    return found.groups()


def settings():
    """Numbers with units that are settings or examples, not measurements,
    each read by hand: (document, the text, why it is no figure of a
    run)."""
    yield "docs/guide/slurm.md", "(SIGTERM, SIGKILL 30 s later)", "the service's own grace, a constant of src/commands/slurm"
    yield "docs/guide/slurm.md", "N + 1 s (121 s by default)", "Slurm's requeue delay, from its cred_expire setting"
    yield "docs/guide/json.md", "drain acknowledged in\n0.62 s", "an example of a progress line"
    yield "docs/guide/snapshots.md", "step times (0.3 s a step)", "the test job's pause between steps, its argument"
    yield "docs/benchmarks.md", "(a 26 GiB image in 4.7 s on a B200)", "NVIDIA Dynamo's own published figure, quoted as theirs"
    yield "docs/benchmarks.md", "That is over the 20 ms issue 36 asked\nfor", "issue 36's goal"
    yield "docs/benchmarks.md", "(The issue's H100 figures, from the filer's run: 173.7 s cold,\n5.85 s and 4.19 s undumped.)", "the issue filer's own figures, quoted as theirs"
    yield "docs/benchmarks.md", "0.3 s a\nstep", "the test job's pause between steps, its argument"
    yield "docs/benchmarks.md", "with 8 MiB batches", "the test job's batch size, its setting"
    yield "docs/benchmarks.md", "plain 8 MiB reads in order", "the read-ahead's chunk, the experiment's setting"
    yield "docs/benchmarks.md", "80GB\nHBM3", "the GPU's model name"
    yield "docs/guide/pytorch.md", "failed within 0.09 s\n  (issue 37)", "issue 37's reported failure, quoted as the issue's"
    yield "docs/guide/criu.md", "(`--timeout`, 10 s by default)", "CRIU's own default"
    yield "docs/guide/criu.md", "`CUDACKPT_LOCK_TIMEOUT` (10 s)", "cudackpt's default"
    yield "docs/guide/criu.md", "(2 × H100, 64 MiB each)", "the bench's size a process"
    yield "docs/guide/disk.md", "after 60 s", "how long the watcher waits, its setting"
    yield "docs/guide/distributed.md", "(within `--drain-timeout`, 30 s by\n   default)", "cudackpt's default"
    yield "docs/guide/distributed.md", "`--drain-timeout` (30 s by default)", "cudackpt's default"
    yield "docs/guide/distributed.md", "a 256 MiB all-reduce", "the scenario's message size"
    yield "docs/guide/disk.md", "in 3 s is named", "how long undump waits for a zombie's parent, its setting"
    yield "docs/guide/disk.md", "a 4 GiB GPU\nprocess", "the scenario's size"
    yield "docs/guide/criu.md", "(a duration, 10 s by default, as CRIU's CUDA\n  plugin)", "cudackpt's default"
    yield "docs/guide/criu.md", "past 4 MiB or\n  65,536 lines", "cudackpt's cap on what it reads"
    yield "docs/benchmarks.md", 'a bound\n("within 1.5%") is rounded up', "the rounding rule's own example"
    yield "docs/benchmarks.md", "`nvmlInit_v2` alone is above 20 ms", "issue 36's goal again"


def tables():
    """(document, rows as computed): each row must be in the document, as
    a line of its own."""
    bench = "docs/benchmarks.md"
    yield bench, latency_table(REL3 + "x4-a/calls/latency.json", None)
    yield bench, latency_table(REL2 + "latency.json", None)
    yield bench, preflight_table(REL3 + "x4-b/calls/preflight.json")
    yield bench, preflight_table(REL2 + "preflight.json")
    yield bench, throughput_table(REL3 + "x4-b/calls/throughput.json", (1024, 8192))
    yield bench, throughput_table(PLUG + "x2-b/throughput/throughput.json", (16, 1024, 8192))
    yield bench, throughput_table(REL2 + "throughput.json", (16, 1024, 8192))
    yield bench, group_log_table(REL3 + "x4-b/calls/group.log")
    yield bench, group_table(PLUG + "x2-d/groups/group.json")
    yield bench, group_table(REL2 + "group.json")
    group2 = run(REL2 + "group.json")
    g2 = {(x["processes"], x["mode"], x["direction"]): x["median_s"] for x in group2["medians"]}
    yield "docs/guide/commands.md", [f"| {n} | {r(g2[(n, 'group', 'suspend')], 2)} s | {r(g2[(n, 'one-by-one', 'suspend')], 2)} s |" for n in (4, 8)]
    yield bench, drain_rows(REL3 + "x2/drain2/drain.json", "2 × H100", 2) + drain_rows(REL3 + "x4-a/drain4/drain.json", "4 × H100", 4)
    yield bench, inference_rows(PLUG + "x2-b/disk/inference.json")
    yield bench, nvml_table()
    yield bench, earlier_inference_tables()
    yield bench, restore_table(PLUG + "x2-e/restore/restore.json")
    yield bench, restore_table("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/disk/throughput.json")
    yield bench, shrink_one_table(PLUG + "x2-c/shrink/shrink.json")
    yield bench, shrink_one_table("2026-11-24-h100-shrink-bench/shrink.json")
    yield "docs/guide/pytorch.md", pytorch_table("2026-11-24-h100-shrink-bench/shrink.json")
    crius = run("2026-11-24-h100-shrink-bench/shrink.json")["jobs"]["default allocator"]["criu"]
    yield bench, [f"| {label} | {r(c['dump_s'], 2)} s | {r(c['image_bytes'] / 1e9, 2 if c['image_bytes'] < 1e10 else 1)} GB | "
                  f"{r(c['restore_s'], 2)} s | {r(c['first_step_s'], 3)} s |"
                  for label, c in (("no drain", crius["plain"]), ("`CUDACKPT_DRAIN=1`", crius["drain"]))]
    yield bench, shrink_ranks_table(PLUG + "x2-a/shrink2/shrink.json")
    yield bench, shrink_ranks_table(REL3 + "x4-a/drain4/shrink.json")
    yield bench, shrink_ranks_table("2026-11-24-h200x2-ddp/shrink-2ranks.json")
    yield bench, shrink_ranks_table("2026-11-26-h100x4-final/3-frameworks-shrink-throughput/shrink/shrink-4ranks.json")


# --- the check ------------------------------------------------------------

DOCS = ["README.md", "docs/benchmarks.md"] + sorted(
    os.path.join("docs", "guide", n) for n in os.listdir(os.path.join(ROOT, "docs", "guide")) if n.endswith(".md"))


#: Where the documents are read: the checkout, or (--docs DIR, for the
#: test that plants a wrong figure) a copy of them; the runs are always
#: the checkout's.
DOCS_ROOT = ROOT


def text_of(doc):
    with open(os.path.join(DOCS_ROOT, doc), encoding="utf-8") as f:
        return f.read()


def parameter_sizes():
    """The sizes the runs were given (MiB): each `size_mib`, `sizes_mib` and
    `hold_mib` in every committed run. "2 GiB per process" is such a size,
    the run's setting rather than its measurement, and counts as checked
    when some run was given it."""
    sizes = set()

    def walk(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                if key in ("size_mib", "hold_mib") and isinstance(inner, (int, float)):
                    sizes.add(int(inner))
                elif key == "sizes_mib" and isinstance(inner, list):
                    sizes.update(int(x) for x in inner)
                else:
                    walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for top, _, files in os.walk(RUNS):
        for name in files:
            if name.endswith(".json"):
                try:
                    with open(os.path.join(top, name), encoding="utf-8") as f:
                        walk(json.load(f))
                except ValueError:
                    continue
    return sizes


def a_parameter(figure, sizes):
    """Whether `figure` ("2 GiB", "16 MiB") is a size some run was given."""
    found = re.fullmatch(r"(\d+)\s?(GiB|MiB)", figure)
    return bool(found) and int(found.group(1)) * (1024 if found.group(2) == "GiB" else 1) in sizes


def covered_spans(doc, text, checked):
    """Where in `text` the checked quotes and table rows lie."""
    spans = []
    for where, quote in checked:
        if where != doc:
            continue
        at = text.find(quote)
        while at != -1:
            spans.append((at, at + len(quote)))
            at = text.find(quote, at + 1)
    return spans


def figures(text):
    """Every figure of `text` outside fenced code: (offset, the figure)."""
    found = []
    fenced = False
    at = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            # Inline code holds values one types (`--timeout 5s`), not
            # measurements: blanked, offsets kept.
            prose = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
            found += [(at + m.start(), m.group(0)) for m in FIGURE.finditer(prose)]
        at += len(line)
    return found


def main():
    global DOCS_ROOT
    args = sys.argv[1:]
    if args[:1] == ["--docs"]:
        DOCS_ROOT, args = args[1], args[2:]
    wrong = []
    checked = []
    for doc, written, computed in quotes():
        checked.append((doc, written))
        if written != computed:
            wrong.append(f"{doc}: writes {written!r}, its run gives {computed!r}")
        elif written not in text_of(doc):
            wrong.append(f"{doc}: does not write {written!r} (its run gives it)")
    for doc, text, _ in settings():
        checked.append((doc, text))
        if text not in text_of(doc):
            wrong.append(f"{doc}: the setting {text!r} is not there any more (take it out of settings())")
    for doc, rows in tables():
        lines = text_of(doc).splitlines()
        for row in rows:
            checked.append((doc, row))
            if row not in lines:
                wrong.append(f"{doc}: no table row {row!r} (its run gives it)")
    sizes = parameter_sizes()
    for doc in DOCS:
        text = text_of(doc)
        spans = covered_spans(doc, text, checked)
        for at, figure in figures(text):
            if not any(a <= at < b for a, b in spans) and not a_parameter(figure, sizes):
                wrong.append(f"{doc}: the figure {figure!r} (at {text[max(0, at - 40):at + 20]!r}) is not tied to a run: quote it "
                             "in quotes() or tables(), or name it in settings() if it is no measurement")
    for line in wrong:
        print(line)
    print(f"{len(checked)} quotes, rows and settings checked")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
