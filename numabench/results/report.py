"""One report from one run, or several runs of one hardware key combined (e.g. the seed's
plain and weighted-interleave CSVs: one table, one weight-ratio curve from 0 to 100%):
grouped tables (terminal text and report.md) and the PNG plots.

``build_report(RUN.json, out=DIR)`` writes ``DIR/report.md`` and the PNGs, and
returns a :class:`Report` (the CLI prints its text or Markdown).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from numabench.errors import UsageError
from numabench.results import memory_outcomes, storage
from numabench.results.host_memory import kinds_markdown, memory_rows, numastat_markdown
from numabench.results.offload_modes import mode_rows, modes_table, winner_sentences
from numabench.results.offload_share import share_rows, share_table
from numabench.results.tables import adam_offload_table, entries, grouped_tables

LEGEND = ("Cells: median ± standard deviation over the rounds, in milliseconds, with the bandwidth "
          "(GB/s, from the median) where the family has one; the fastest cell of a row is bold where it is "
          "faster beyond noise; `!` marks a value above what the machine can do. "
          "Rows by size (and the other axes that vary), columns by NUMA policy (or impl/schedule "
          "where the run has one policy).")


@dataclass
class Report:
    run_path: str
    markdown: str
    text: str
    images: list[Path] = field(default_factory=list)
    markdown_path: Path | None = None


def _machine_lines(run: dict) -> list[str]:
    nb = (run.get("machine_info") or {}).get("numabench", {})
    lines = [f"hardware key: {nb.get('hardware_key', 'unknown')}"]
    if nb.get("gpus"):
        lines.append(f"GPUs: {nb.get('gpu_count', len(nb['gpus']))} x {', '.join(nb.get('gpu_models') or [])}")
    if nb.get("cpu_model"):
        lines.append(f"CPU: {nb['cpu_model']}, {nb.get('numa_nodes', '?')} NUMA node(s)"
                     + (f", kernel {nb['kernel']}" if nb.get("kernel") else ""))
    if run.get("datetime"):
        lines.append(f"run at: {run['datetime']}")
    commit = run.get("commit_info") or {}
    if commit.get("id") and commit["id"] != "unknown":
        lines.append(f"commit: {commit['id'][:12]}{' (dirty)' if commit.get('dirty') else ''}")
    if nb.get("source") == "seed-csv":
        lines.append("source: imported seed CSV (means only)")
    return lines


def _host_memory_sections(run: dict, family: str | None, where: dict | None, md: list[str],
                          text: list[str]) -> tuple[list[str], list[str]]:
    """The placement of each kind (the place axis) and each rank's memory per node (numastat -p)."""
    rows = memory_rows(run, family, where)
    if any(r.kinds for r in rows):
        table = kinds_markdown([r for r in rows if r.kinds])
        title = "Placement by tensor kind (place)"
        md += [f"## {title}", "", ("Each kind of a rank's host state under its own policy (`process`: the case's "
                                   "policy places it), its planned MiB and where its pages are (move_pages), "
                                   "checked before anything was timed."), "", table, ""]
        text += [title, table, ""]
    if any(r.memory for r in rows):
        table = numastat_markdown(rows)
        title = "Host memory per NUMA node after set-up (numastat -p)"
        md += [f"## {title}", "", ("Each rank's resident memory per node in numastat's categories (MiB): Huge "
                                   "(hugetlb), Heap, Stack, Private (anonymous, mmap'd and pinned buffers, file "
                                   "pages)."), "", table, ""]
        text += [title, table, ""]
    return md, text


def combine_runs(paths: Sequence[str | Path]) -> dict:
    """Several runs as one: the first run's machine, every run's entries (a later run's entry
    replaces an earlier one of the same name). Runs of different hardware are refused."""
    from numabench.machine.hwkey import run_hardware_key

    runs = [storage.load_run(p) for p in paths]
    keys = {str(p): run_hardware_key(r) for p, r in zip(paths, runs)}
    if len(set(keys.values())) > 1:
        raise UsageError("report: runs of different hardware cannot form one table: "
                         + ", ".join(f"{p} [{k}]" for p, k in keys.items()))
    return combined_run(runs)


def combined_run(runs: Sequence[dict], machine_of: int = 0) -> dict:
    """Runs (oldest first) as one: the machine and other fields of ``runs[machine_of]``, every run's
    entries (a later run's entry replaces an earlier one of the same name) and out-of-memory records."""
    by_name: dict[str, dict] = {}
    for r in runs:
        for b in r.get("benchmarks", []):
            by_name[b.get("fullname", b.get("name"))] = b
    out = {**runs[machine_of], "benchmarks": list(by_name.values())}
    out.pop(memory_outcomes.KEY, None)
    memory = memory_outcomes.combined(runs)  # the out-of-memory records of every run
    if memory is not None:
        out[memory_outcomes.KEY] = memory
    return out


def build_report(run_path: str | Path | Sequence[str | Path], out: str | Path | None = None, *,
                 family: str | None = None, where: dict | None = None, plots: bool = True) -> Report:
    paths = [run_path] if isinstance(run_path, (str, Path)) else list(run_path)
    run = combine_runs(paths) if len(paths) > 1 else storage.load_run(paths[0])
    run_path = " + ".join(str(p) for p in paths) if len(paths) > 1 else paths[0]
    tables = grouped_tables(run, family, where)
    if out is None:
        return _report(run, paths, run_path, tables, family, where, None, plots)
    from numabench.atomic import staged_folder

    out = Path(out)
    with staged_folder(out, into_existing=True) as stage:  # report.md and the plots appear whole, or nothing
        rep = _report(run, paths, run_path, tables, family, where, stage, plots)
    rep.images = [out / p.name for p in rep.images]
    rep.markdown_path = out / "report.md"
    return rep


MODES_LEGEND = (
    "recipe: its name (fp32 + autocast, bf16 + fp32 master, fp32) and where the fp32 master lives (each mode's "
    "whole recipe is listed below the table). forward / backward / optimizer (what is left after backward returns) on our clock (CUDA events); "
    "DS optimizer_step: DeepSpeed's own timer of its CPU Adam (under ZeRO-3 with the parameters' copy to the "
    "GPU); GPU idle >= (ZeRO-2): that timer's share of the step, GPU idle by construction; GPU peak: allocated "
    "and reserved by torch's caching allocator over the set-up steps, the largest rank's; GPU B/param: what the "
    "mode keeps on the GPU per parameter (a model: numabench.families.train_step.memory); host GiB per node: "
    "the rank's memory as numastat -p totals it (with its helper processes' private pages: ZenFlow's "
    "optimizer process), and its pinned share; PCIe B/param: a model of each mode's copies; PCIe bound: those "
    "bytes over the measured pinned copy rates (one way each, and both at once); host "
    "bound: a CPU-side optimizer's host-memory bytes (Adam's 28 B/param, +2 for DeepSpeed's bf16 copy) over "
    "host_membw's adam_pattern rate; x (forward + bound): the step over forward plus the larger bound, which "
    "is named (near 1: the mode is at that limit); x same-recipe no-offload: the step over the step of the "
    "no-offload mode that trains the same recipe (same model, dtype, ranks and policy; on a machine of one NUMA "
    "node another policy's where the row's own is missing, named in brackets). mode: a split mode with the share "
    "of its optimizer state on the host (r=), ZenFlow with its top-k share and update interval; ZenFlow's step "
    "is its mean over whole update intervals, and its recipe says \"stale updates\": it is not the same "
    "optimizer (the other columns are stepped once per interval from gradients summed since), so its ratio to "
    "the reference is not a like-for-like cost.")


def offload_section(run: dict, modes: list) -> list[str]:
    """The train_step modes' table, its rates, the cases that ran out of memory, each mode's
    capacity and which offload wins: Markdown lines."""
    from numabench.results.offload_capacity import capacity_rows, capacity_table
    from numabench.results.offload_limits import MEASURE_RATES, measured_rates, rates_note
    from numabench.results.offload_modes import out_of_memory_notes, recipe_notes

    policies = sorted({r.policy for r in modes})
    rates = {p: rates_note(measured_rates(entries(run), p)) for p in policies}
    out = ["## train_step — where the step goes, per mode", "", MODES_LEGEND, "", modes_table(modes), "",
           "Recipes:", ""] + [f"- {n}" for n in recipe_notes(modes)] + [""]
    out += ["Rates the bounds use" + (":" if len(rates) == 1 else ", per policy:"), ""]
    out += [f"- {p}: {note}" for p, note in rates.items()]
    if any(note == rates_note(measured_rates([])) for note in rates.values()):
        out += [f"- measured by: `{MEASURE_RATES}`"]
    out.append("")
    notes = out_of_memory_notes(modes)
    if notes:
        out += ["Out of memory:", ""] + [f"- {n}" for n in notes] + [""]
    caps = capacity_rows(modes, run)
    if caps:
        out += ["Capacity of each mode on this machine (one rank):", "", capacity_table(caps, run), ""]
        out += _split_only_lines(modes, run)
    wins = winner_sentences(modes)
    if wins:
        key = (run.get("machine_info") or {}).get("numabench", {}).get("hardware_key", "this machine")
        out += [f"Which offload wins on {key}:", ""] + [f"- {w}" for w in wins] + [""]
    return out


def _split_only_lines(modes: list, run: dict) -> list[str]:
    """The models only a GPU/host split holds on this machine (one sequence, the rows' dtype) and each
    mode's predicted outcome at the smallest of them, from the capacity model."""
    from numabench.results.offload_predict import predict, prediction_table, split_only_models

    mem = memory_outcomes.memory_of(run) or {}
    gpus = [g for g in mem.get("gpu_bytes") or [] if g]
    dtypes = sorted({r.dtype for r in modes if r.nprocess == 1})
    if not gpus or not mem.get("host_bytes") or not dtypes:
        return []
    dtype = "bf16" if "bf16" in dtypes else dtypes[0]
    names = split_only_models(1, dtype, min(gpus), mem["host_bytes"])
    if not names:
        return [f"No model of the family needs a split on this machine ({dtype}, one sequence): each fits "
                "on the GPU or whole on the host, or none fits at all.", ""]
    return [f"Models only a GPU/host split holds here ({dtype}, one sequence): {', '.join(names)}; predicted "
            f"per mode for {names[0]} (the capacity model, before any run):", "",
            prediction_table(predict(names[0], 1, dtype, min(gpus), mem["host_bytes"])), ""]


def _report(run: dict, paths: list, run_path, tables: list, family: str | None, where: dict | None,
            out: Path | None, plots: bool) -> Report:
    """The report, its report.md and plots written into the folder ``out`` (None: none)."""
    machine = _machine_lines(run)
    images: list[Path] = []
    if out is not None and plots:
        from numabench.results.plots import all_plots

        images = all_plots(run, out, family, where)
    md = [f"# numabench report: {' + '.join(Path(p).name for p in paths)}", "", *[f"- {m}" for m in machine], "", LEGEND, ""]
    text = [f"numabench report: {run_path}", *machine, ""]
    families = sorted({t.family for t in tables})
    if not families:
        md.append("No numabench benchmarks in this run" + (" match the selection." if family or where else "."))
        text.append(md[-1])
    for fam in families:
        md += [f"## {fam}", ""]
        for img in images:
            if img.name.startswith(f"{fam}_"):
                md += [f"![{img.stem}]({img.name})", ""]
        for t in tables:
            if t.family == fam:
                md += [t.markdown(), ""]
                text += [t.text(), ""]
        if fam == "adam_offload" and not where and not any(e.get("impl") is None for e in entries(run)
                                                           if e.family == fam):
            md += ["### adam_offload — per configuration, against this run's copy ceilings", "",
                   adam_offload_table(run), ""]
    shares = share_rows(run) if family in (None, "train_step", "adam_offload") and not where else []
    if shares:
        md += ["## adam_offload beside DeepSpeed's optimizer step", "",
               ("DeepSpeed's engine.step() (gradients to the host, its CPU Adam, parameters back) and the "
                "adam_offload step of the same parameters per rank, ranks, policy and dtype (the fastest "
                "schedule); explained = adam_offload / engine.step."), "", share_table(shares), ""]
        text += ["adam_offload beside DeepSpeed's optimizer step", share_table(shares), ""]
    modes = mode_rows(run) if family in (None, "train_step") and not where else []
    if modes:
        section = offload_section(run, modes)
        md += section
        text += [line for line in section if not line.startswith("## ")]
    md, text = _host_memory_sections(run, family, where, md, text)
    markdown = "\n".join(md).rstrip() + "\n"
    md_path = None
    if out is not None:
        md_path = out / "report.md"
        md_path.write_text(markdown)
    return Report(str(run_path), markdown, "\n".join(text).rstrip() + "\n", images, md_path)
