"""PNG plots of a pytest-benchmark run (matplotlib, Agg backend: no display needed).

Per family, and per combination of the axes that are neither size nor the
series axis (policy, or impl/schedule where the run has one policy):

- latency vs size, log-log, one line per series, one panel per phase;
- bandwidth bars (GB/s), grouped by size, one bar per series, one panel per phase;
- for runs with weighted-interleave policies: time vs weight ratio (share of
  pages on the first node of the weights), one line per size, one panel per
  phase; bind to either node and plain interleave over the same nodes are the
  100 %, 0 % and 50 % points where the run has them (``report A.json B.json``
  combines a plain and a weighted run into one 0-100 % curve). Times are absolute,
  on a log axis. A gap between measured ratios wider than ``MAX_JOIN_PP`` points is
  shaded as not measured, never joined by a line (a straight line there is no prediction).

Plots carry the flags their tables do (tables.Entry.flag): a value faster than the machine can
move the bytes ('!') or whose ceiling is unknown ('?', an unknown GPU model) is drawn hatched
(bars) or ringed (points), marked with its sign, and explained in a note under the figure; it
is drawn, not left out, so the figure and the table show the same cells. Bandwidth of runs of
several GPUs is the sum over their GPUs, and the axis says so. ``overlapping_labels(fig)`` lists
the pairs of text labels of a figure that overlap (for tests, and for any other figure maker).

Every function returns the paths it wrote.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from numabench.cases import KNOB_DEFAULT, format_size
from numabench.results.tables import (
    CPULESS_MARK,
    Entry,
    _sort_value,
    column_axes,
    cpuless_nodes,
    entries,
    mark_cpuless,
    phase_key,
    series_label,
    varying,
)

FLAG_NOTES = {"!": "! hatched/ringed: faster than this machine can move the bytes (its measured ceiling, or the GPU's "
                    "nominal memory or PCIe Gen5 bandwidth): not a real bandwidth",
              "?": "? dotted/ringed: GPU model unknown: bandwidth ceiling unknown, value not checked"}
FLAG_STYLE = {"!": {"hatch": "///", "edgecolor": "red", "color": "red"},
              "?": {"hatch": "...", "edgecolor": "darkorange", "color": "darkorange"}}
FLAG_GID = "numabench-flag"  # the one-character flag marks beside points: overlapping_labels leaves them out
MAX_JOIN_PP = 20.0  # weighted plots: measured ratios further apart than this are not joined by a line

FIG_AXES = ("nprocess", "dtype", "impl", "schedule", "kernel", "place")
PHASE_TITLES = {"h2d": "H2D (host to device)", "d2h": "D2H (device to host)", "compute": "compute (GPU Adam)",
                "time": "time", "write": "write"}
# a phase whose meaning depends on the family
FAMILY_PHASE_TITLES = {("adam_offload", "step"): "step (H2D + compute + D2H)",
                       ("cpu_adam", "step"): "step (CPU Adam)",
                       ("train_step", "step"): "training step (forward, backward, optimizer)",
                       ("dataloader", "batch"): "one batch into the rank's device"}
# what the size axis counts, where it is not elements
SIZE_LABELS = {"dataloader": "batch size (samples per rank)", "train_step": "global batch (sequences)"}


def phase_title(family: str, phase: str) -> str:
    return FAMILY_PHASE_TITLES.get((family, phase)) or PHASE_TITLES.get(phase, phase)


def size_label(family: str) -> str:
    return SIZE_LABELS.get(family, "size (elements)")


def latency_label(es: list[Entry]) -> str:
    """Imported seed values are means without spread: say so rather than "median"."""
    if es and all(e.mean_only for e in es):
        return "mean latency (ms; imported means, spread unknown)"
    if any(e.mean_only for e in es):
        return "latency (ms; median, or mean where imported)"
    return "median latency (ms)"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", text).strip("_")


def _figure_groups(es: list[Entry], exclude: tuple[str, ...]) -> dict[tuple, list[Entry]]:
    axes = [a for a in FIG_AXES if a not in exclude and len(varying(es, a)) > 1]
    groups: dict[tuple, list[Entry]] = defaultdict(list)
    for e in es:
        groups[tuple((a, e.get(a)) for a in axes)].append(e)
    return dict(sorted(groups.items(), key=lambda kv: [_sort_value(a, v) for a, v in kv[0]]))


def _describe(group: tuple) -> str:
    parts = []
    for a, v in group:
        parts.append(f"np{v}" if a == "nprocess" else str(v))
    return " ".join(parts)


def _context(es: list[Entry], exclude: tuple[str, ...]) -> str:
    """All non-series axes' values of a figure's entries (constant ones too), for its title."""
    parts = []
    for a in FIG_AXES:
        vals = varying(es, a)
        if a in exclude or vals in ([None], [KNOB_DEFAULT]):  # a knob at auto: as before the knob
            continue
        text = ",".join(map(str, vals))
        parts.append(f"np{text}" if a == "nprocess" else text)
    return " ".join(parts)


def _panels(plt, n: int, title: str):
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axs = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.2 * rows + 0.8), squeeze=False)
    fig.suptitle(title, fontsize=13, y=0.995)
    for ax in axs.flat[n:]:
        ax.set_visible(False)
    return fig, list(axs.flat[:n])


def _shared_legend(fig, axs, title: str, cpuless: set[int] | None = None) -> None:
    """One legend for all panels, under the title (panels share their series); a policy that
    places memory on a CPU-less (CXL-like) node is marked."""
    seen: dict[str, object] = {}
    for ax in axs:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(mark_cpuless(lab, cpuless or set()), h)
    if any(CPULESS_MARK in lab for lab in seen):
        title += f"  ({CPULESS_MARK}: CPU-less node)"
    if seen:
        fig.legend(list(seen.values()), list(seen), title=title, loc="upper center", ncol=min(len(seen), 6),
                   bbox_to_anchor=(0.5, 1 - 0.45 / fig.get_figheight()), fontsize=10, title_fontsize=10,
                   frameon=False)


def _renderer(fig):
    """An Agg renderer of ``fig`` after a draw (ticks and layout up to date)."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def overlapping_labels(fig, min_gap_px: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty text labels of ``fig`` whose boxes overlap (closer than
    ``min_gap_px``): tick labels, titles, axis labels, legend texts, annotations (not the flag
    marks beside points, gid FLAG_GID). Renders with Agg (a closed figure too)."""
    from matplotlib.text import Text

    renderer = _renderer(fig)
    boxes = []
    seen: set[int] = set()
    for t in fig.findobj(Text):
        if id(t) in seen or not t.get_visible() or not t.get_text().strip() or t.get_gid() == FLAG_GID:
            continue
        seen.add(id(t))
        if t.axes is not None and not t.axes.get_visible():
            continue
        bb = t.get_window_extent(renderer)
        if bb.width <= 0 or bb.height <= 0:
            continue
        boxes.append((t.get_text(), bb.expanded(1, 1).padded(min_gap_px / 2)))
    out = []
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i][1], boxes[j][1]
            if a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1:
                out.append((boxes[i][0], boxes[j][0]))
    return out


def covered_points(fig) -> list[tuple[float, float]]:
    """Data points (of lines and error bars) that a legend box of ``fig`` covers, in display pixels."""
    renderer = _renderer(fig)
    legends = [lg for ax in fig.axes for lg in [ax.get_legend()] if lg is not None] + list(fig.legends)
    boxes = [lg.get_window_extent(renderer) for lg in legends]
    out = []
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_visible() or line.get_marker() in (None, "None", "", " "):
                continue
            for x, y in ax.transData.transform(line.get_xydata()):
                if any(b.contains(x, y) for b in boxes):
                    out.append((float(x), float(y)))
    return out


def _flag_points(ax, pts: list[tuple[float, float, str]]) -> None:
    """Ring and sign each flagged point (x, y, flag)."""
    for x, y, flag in pts:
        if not flag:
            continue
        st = FLAG_STYLE[flag]
        ax.plot([x], [y], marker="o", markersize=11, markerfacecolor="none", markeredgecolor=st["color"],
                markeredgewidth=1.5, linestyle="none", zorder=5)
        ax.annotate(flag, (x, y), xytext=(5, 5), textcoords="offset points", color=st["color"], fontsize=9,
                    fontweight="bold", gid=FLAG_GID)


def _flag_note(fig, es: list[Entry]) -> None:
    """The note under a figure explaining the flags its entries carry."""
    flags = sorted({e.flag for e in es if e.flag})
    if flags:
        fig.text(0.01, 0.0, "\n".join(FLAG_NOTES[f] for f in flags), fontsize=8, ha="left", va="top",
                 color="dimgray")


def _save(fig, path: Path, top_legend: bool = True) -> Path:
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.75 if top_legend else 0.1) / fig.get_figheight()))
    # tight bounds: a title or legend outside the axes is never cut off
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.15)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _run_label(run: dict) -> str:
    nb = (run.get("machine_info") or {}).get("numabench", {})
    return nb.get("hardware_key") or "unknown hardware"


def _figures(es: list, family: str | None):
    """(family, entries, series axes, phases, description) for each figure to draw."""
    for fam in sorted({e.family for e in es}):
        if family and fam != family:
            continue
        fes = [e for e in es if e.family == fam]
        series_axes = column_axes(fes)
        for group, ges in _figure_groups(fes, series_axes).items():
            yield fam, ges, series_axes, sorted({e.phase for e in ges}, key=phase_key), _describe(group)


def latency_plots(run: dict, out: Path, family: str | None = None, where: dict | None = None) -> list[Path]:
    plt = _plt()
    written = []
    for fam, ges, series_axes, phases, desc in _figures(entries(run, where), family):
        what = "mean latency" if all(e.mean_only for e in ges) else "median latency"
        fig, axs = _panels(plt, len(phases), f"{fam}: {what} vs size  [{_context(ges, series_axes)}]"
                           f"  {_run_label(run)}")
        for ax, phase in zip(axs, phases):
            lines: dict[str, list[Entry]] = defaultdict(list)
            for e in ges:
                if e.phase == phase:
                    lines[series_label(e, series_axes)].append(e)
            for label in _series_order(lines, series_axes):
                pts = sorted(lines[label], key=lambda e: e.get("numel"))
                xs = [e.get("numel") for e in pts]
                ys = [e.median_s * 1e3 for e in pts]
                err = [0 if e.stddev_s is None else e.stddev_s * 1e3 for e in pts]
                ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=2, linewidth=1.4, label=label)
                _flag_points(ax, [(x, y, e.flag) for x, y, e in zip(xs, ys, pts)])
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(phase_title(fam, phase))
            ax.set_xlabel(size_label(fam))
            ax.set_ylabel(latency_label([e for e in ges if e.phase == phase]))
            ax.grid(True, which="both", alpha=0.3)
            sizes = sorted({e.get("numel") for e in ges})
            ax.set_xticks(sizes, [format_size(s) for s in sizes])
            ax.minorticks_off() if len(sizes) > 1 else None
        _shared_legend(fig, axs, _legend_title(series_axes), cpuless_nodes(run))
        _flag_note(fig, ges)
        name = f"{_slug(fam)}_latency" + (f"_{_slug(desc)}" if desc else "") + ".png"
        written.append(_save(fig, out / name))
    return written


def _legend_title(series_axes: tuple[str, ...]) -> str:
    return "/".join(series_axes) if series_axes else "policy"


def _series_order(lines: dict, series_axes: tuple[str, ...]) -> list[str]:
    return sorted(lines, key=lambda s: [_sort_value(a, v) for a, v in zip(series_axes or ("policy",), s.split("/"))])


def bandwidth_plots(run: dict, out: Path, family: str | None = None, where: dict | None = None) -> list[Path]:
    plt = _plt()
    written = []
    for fam, ges, series_axes, phases, desc in _figures([e for e in entries(run, where) if e.gbps is not None],
                                                        family):
        fig, axs = _panels(plt, len(phases), f"{fam}: bandwidth per {_legend_title(series_axes)}  "
                           f"[{_context(ges, series_axes)}]  {_run_label(run)}")
        for ax, phase in zip(axs, phases):
            pes = [e for e in ges if e.phase == phase]
            sizes = sorted({e.get("numel") for e in pes})
            labels = _series_order({series_label(e, series_axes): 1 for e in pes}, series_axes)
            width = 0.8 / max(1, len(labels))
            for i, label in enumerate(labels):
                by_size = {e.get("numel"): e for e in pes if series_label(e, series_axes) == label}
                xs = [j + (i - (len(labels) - 1) / 2) * width for j, s in enumerate(sizes) if s in by_size]
                bes = [by_size[s] for s in sizes if s in by_size]
                ys = [e.gbps for e in bes]
                bars = ax.bar(xs, ys, width=width * 0.95, label=label)
                for bar, e in zip(bars, bes):
                    if e.flag:
                        st = FLAG_STYLE[e.flag]
                        bar.set_hatch(st["hatch"])
                        bar.set_edgecolor(st["edgecolor"])
                        ax.annotate(e.flag, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                                    textcoords="offset points", ha="center", va="bottom", color=st["color"],
                                    fontsize=9, fontweight="bold", gid=FLAG_GID)
            ax.set_xticks(range(len(sizes)), [format_size(s) for s in sizes])
            ax.set_title(phase_title(fam, phase))
            ax.set_xlabel(size_label(fam))
            ax.set_ylabel(bandwidth_label(pes))
            ax.margins(y=0.1)
            ax.grid(True, axis="y", alpha=0.3)
        _shared_legend(fig, axs, _legend_title(series_axes), cpuless_nodes(run))
        _flag_note(fig, ges)
        name = f"{_slug(fam)}_bandwidth" + (f"_{_slug(desc)}" if desc else "") + ".png"
        written.append(_save(fig, out / name))
    return written


def bandwidth_label(es: list[Entry]) -> str:
    """The bandwidth axis' label: of one GPU, or summed over the GPUs of a multi-GPU run."""
    stat = "mean" if es and all(e.mean_only for e in es) else "median"
    nps = sorted({int(e.get("nprocess") or 1) for e in es})
    if nps and nps[-1] > 1:
        many = f"{nps[-1]} GPUs" if len(nps) == 1 else "GPUs (np of the run)"
        return f"bandwidth summed over {many} (GB/s, from the {stat})"
    return f"bandwidth (GB/s, from the {stat})"


def _few_log_ticks(ax) -> None:
    """A log y axis spanning less than a decade gets plain-number ticks (else it may show one)."""
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator, NullFormatter

    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 10:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(lo, hi)


def _weight_point(policy: str) -> tuple[tuple[int, ...], float, str] | None:
    """weighted:0=1,2=3 -> ((0, 2), 25.0, '1:3'): node set, % of pages on the first node, label."""
    from numabench.numa.policy import Policy

    try:
        p = Policy.parse(policy)
    except Exception:
        return None
    if p.kind == "weighted" and len(p.nodes) >= 2:
        return p.nodes, 100.0 * p.weights[0] / sum(p.weights), ":".join(map(str, p.weights))
    return None


def weighted_plots(run: dict, out: Path, family: str | None = None, where: dict | None = None) -> list[Path]:
    """Time vs weight ratio, for runs with weighted-interleave policies. Where ratios were not
    measured (a gap wider than MAX_JOIN_PP), the advisor's model (numabench.results.advise) is
    drawn dotted from the two single-node ends, and the gap says it is extrapolated and how far
    from a measurement."""
    from numabench.results.advise import HOST_FREE, host_only, predict

    es = entries(run, where)
    written = []
    plt = None
    for fam in sorted({e.family for e in es}):
        if family and fam != family:
            continue
        fes = [e for e in es if e.family == fam]
        node_sets = sorted({w[0] for e in fes if (w := _weight_point(str(e.get("policy")))) is not None})
        for nodes in node_sets:
            plt = plt or _plt()
            # x for each policy of this node set: weighted, and bind/interleave endpoints where present
            xpos: dict[str, tuple[float, str]] = {}
            for pol in {str(e.get("policy")) for e in fes}:
                w = _weight_point(pol)
                if w and w[0] == nodes:
                    xpos[pol] = (w[1], w[2])
            first, rest = nodes[0], nodes[1:]
            xpos[f"bind:{first}"] = (100.0, f"bind:{first}")
            if len(nodes) == 2:
                xpos[f"bind:{rest[0]}"] = (0.0, f"bind:{rest[0]}")
                xpos[f"interleave:{first},{rest[0]}"] = (50.0, "interleave")
            wes = [e for e in fes if str(e.get("policy")) in xpos]
            for group, ges in _figure_groups(wes, ()).items():
                phases = sorted({e.phase for e in ges}, key=phase_key)
                desc = _describe(group)
                fig, axs = _panels(plt, len(phases), f"{fam}: time vs weighted-interleave ratio, nodes "
                                   f"{','.join(map(str, nodes))}  [{_context(ges, ())}]  {_run_label(run)}")
                for ax, phase in zip(axs, phases):
                    pes = [e for e in ges if e.phase == phase]
                    gaps: set[tuple[float, float]] = set()
                    model_drawn: dict[tuple[float, float], bool] = {}
                    for size in sorted({e.get("numel") for e in pes}):
                        pts = sorted((xpos[str(e.get("policy"))][0], e.median_s * 1e3, e.flag) for e in pes
                                     if e.get("numel") == size)
                        ends = {x: y for x, y, _ in pts if x in (0.0, 100.0)}
                        # join measured ratios only where they are close: a wide gap is not measured
                        segment: list = []
                        color = None
                        for k, pt in enumerate(pts):
                            if segment and pt[0] - segment[-1][0] > MAX_JOIN_PP:
                                gaps.add((segment[-1][0], pt[0]))
                                color = _line(ax, segment, color, format_size(size))
                                # the advisor's model across the gap, from the two single-node ends
                                if len(nodes) == 2 and len(ends) == 2 and (fam, phase) not in HOST_FREE:
                                    floor = 0.0 if host_only(fam) else min(ends.values())
                                    xs = [segment[-1][0] + (pt[0] - segment[-1][0]) * i / 40 for i in range(41)]
                                    ax.plot(xs, [predict(x / 100, ends[100.0], ends[0.0], floor) for x in xs],
                                            linestyle=":", linewidth=1.2, color=color, marker=None)
                                    model_drawn[(segment[-1][0], pt[0])] = True
                                segment = []
                            segment.append(pt)
                        _line(ax, segment, color, format_size(size))
                        _flag_points(ax, pts)
                    for a, b in sorted(gaps):
                        ax.axvspan(a, b, color="gray", alpha=0.12, linewidth=0)
                        modelled = model_drawn.get((a, b))
                        note = ("not measured" if not modelled else
                                f"not measured: model dotted,\nextrapolated up to {(b - a) / 2:.0f} pts "
                                "from a measurement")
                        ax.text((a + b) / 2, 0.5, note, transform=ax.get_xaxis_transform(),
                                ha="center", va="center", rotation=90, fontsize=8, color="dimgray")
                    ticks = sorted({xpos[str(e.get("policy"))] for e in pes})
                    ax.set_xticks([t[0] for t in ticks], [f"{t[1]} ({t[0]:.0f}%)" for t in ticks], fontsize=8,
                                  rotation=90)
                    ax.set_title(phase_title(fam, phase))
                    ax.set_xlabel(f"share of pages on node {first} (%) / weights "
                                  + ":".join(f"N{n}" for n in nodes))
                    # absolute times, log scale: a curve that lacks the single-node ends cannot
                    # make its own best point look like the best there is
                    ax.set_yscale("log")
                    _few_log_ticks(ax)
                    ax.set_ylabel(latency_label(pes))
                    # outside the axes: a legend inside covers points (the single-node ends)
                    ax.legend(title="size", fontsize=8, title_fontsize=8, loc="upper left",
                              bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
                    ax.grid(True, which="both", alpha=0.3)
                _flag_note(fig, ges)
                name = (f"{_slug(fam)}_weighted_N{'-'.join(map(str, nodes))}" + (f"_{_slug(desc)}" if desc else "")
                        + ".png")
                written.append(_save(fig, out / name, top_legend=False))
    return written


def _line(ax, pts: list, color, label: str):
    """Draw one measured stretch of a curve; later stretches of the same size share its colour
    and no legend entry. Returns the colour."""
    if not pts:
        return color
    kw = {"color": color} if color else {"label": label}
    (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", **kw)
    return line.get_color()


# the families' own throughput metrics (extra_info key, axis label), plotted beside the times
THROUGHPUT = {"train_step": (("tokens_per_s", "tokens/s"), ("tflops", "model TFLOPS (6 x params x tokens / time)")),
              "dataloader": (("samples_per_s", "samples/s into the rank's device"),)}


def throughput_plots(run: dict, out: Path, family: str | None = None, where: dict | None = None) -> list[Path]:
    """Per family with throughput metrics: each metric vs size, one line per series."""
    plt = _plt()
    metrics_of = {b.get("fullname", b.get("name")): b.get("extra_info") or {} for b in run.get("benchmarks", [])}
    written = []
    es = [e for e in entries(run, where) if e.family in THROUGHPUT]
    for fam, ges, series_axes, phases, desc in _figures(es, family):
        metrics = THROUGHPUT[fam]
        fig, axs = _panels(plt, len(metrics), f"{fam}: throughput vs size  [{_context(ges, series_axes)}]  "
                           f"{_run_label(run)}")
        for ax, (key, label) in zip(axs, metrics):
            lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
            for e in ges:
                value = metrics_of.get(e.fullname, {}).get(key)
                if isinstance(value, (int, float)):
                    lines[series_label(e, series_axes)].append((e.get("numel"), float(value)))
            for lab in _series_order(lines, series_axes):
                pts = sorted(lines[lab])
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lab)
            sizes = sorted({e.get("numel") for e in ges})
            ax.set_xscale("log")
            ax.set_xticks(sizes, [format_size(s) for s in sizes])
            ax.minorticks_off()
            ax.set_title(label)
            ax.set_xlabel(size_label(fam))
            ax.set_ylabel(label + " (from the median step)")
            ax.grid(True, alpha=0.3)
        _shared_legend(fig, axs, _legend_title(series_axes), cpuless_nodes(run))
        name = f"{_slug(fam)}_throughput" + (f"_{_slug(desc)}" if desc else "") + ".png"
        written.append(_save(fig, out / name))
    return written


def all_plots(run: dict, out: str | Path, family: str | None = None, where: dict | None = None) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return (latency_plots(run, out, family, where) + bandwidth_plots(run, out, family, where)
            + throughput_plots(run, out, family, where) + weighted_plots(run, out, family, where))
