"""Text forms of a report: the terminal table, summary.md, and the per-cell summary table.

The per-cell summary table (:func:`summary_table`) is written as summary.csv and logged to W&B with the same columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from typing import Any

from rlsweep.records import FIXED_COST_PARTS, PHASES
from rlsweep.report import model
from rlsweep.report.model import CellSummary, MarginalEffect, Report, spec_text


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _ci_text(low: float | None, high: float | None, spec: str = ".3f") -> str:
    return "-" if low is None or high is None else f"[{low:{spec}}, {high:{spec}}]"


def _return_text(cell: CellSummary) -> str:
    """Median final return and its interquartile range (over seeds, or one seed's eval episodes)."""
    if cell.final_return_median is None:
        return "-"
    if cell.final_return_q25 is None or cell.final_return_q75 is None:
        return f"{cell.final_return_median:.4g}"
    over = "seeds" if cell.final_return_iqr_over == "seeds" else "eval"
    return (f"{cell.final_return_median:.4g} "
            f"[IQR {cell.final_return_q25:.4g}, {cell.final_return_q75:.4g}; {over}]")


def _unclean(cell: CellSummary) -> str | None:
    """Why the cell's ratio is not clean (its measurement flags, or its baseline's), None when clean."""
    return (", ".join(cell.flags) or "baseline flagged") if cell.flags or cell.ratio_clean is False else None


def _not_applicable_groups(report: Report) -> list[tuple[str, str]]:
    """("<toggle> n/a: <reason>", "all cells" or the cell labels), in first-seen order."""
    groups: dict[str, list[str]] = {}
    for cell in report.cells:
        for entry in cell.not_applicable:  # "<toggle>: <reason>" -> "<toggle> n/a: <reason>"
            groups.setdefault(entry.replace(": ", " n/a: ", 1), []).append(cell.label)
    with_records = [c for c in report.cells if c.n_ok + c.n_failed > 0]
    return [(text, "all cells" if len(labels) == len(with_records) > 1 else ", ".join(labels))
            for text, labels in groups.items()]


# ---------------------------------------------------------------------------- terminal


#: the terminal summary's width: what a default terminal shows without wrapping
TERMINAL_WIDTH = 120


def ratio_intervals(cell: CellSummary) -> list[tuple[float | None, float | None, float | None]]:
    """The cell's steady-state and end-to-end ratios, each with its 95% interval (value, low, high), as the terminal,
    summary.md and ratio.png show them: a baseline's without one (it is the reference, its bounds 1 by definition)."""
    both = ((cell.ratio, cell.ci_low, cell.ci_high),
            (cell.end_to_end_ratio, cell.end_to_end_ci_low, cell.end_to_end_ci_high))
    return [(value, None, None) if cell.is_baseline else (value, low, high) for value, low, high in both]


def _short_ratio(ratio: float | None, low: float | None, high: float | None, unit: str = "") -> str:
    """``1.65 [1.60, 1.70]``: two decimals for the terminal (summary.md keeps three)."""
    if ratio is None:
        return "-"
    return f"{ratio:.2f}{unit}" + ("" if low is None or high is None else " " + _ci_text(low, high, ".2f"))


def cell_marks(cell: CellSummary, learning: str = "LEARNING") -> list[str]:
    """The marks the verdict and ratio.png put on a cell: NOT CLEAN (a measurement flag on it or its
    baseline) and ``learning`` (its final return differs from the baseline's)."""
    why = _unclean(cell)
    return ([f"NOT CLEAN ({why})"] if why else []) + ([learning] if cell.learning_flag else [])


def _rated(report: Report) -> list[CellSummary]:
    return [c for c in report.cells if c.ratio is not None and not c.is_baseline]


def _steps(n: float) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e4 else f"{n:,.0f}"


def _evidence(ratio: float | None, low: float | None, high: float | None, n: int, needed: int | None,
              why: str | None) -> str:
    """What an interval says, in words, and what would make a thin one enough."""
    if ratio is None:
        return ""
    if low is None or high is None:
        return f"no interval ({why or '1 seed'}; 3 or more give one)"
    if low > 1.0 or high < 1.0:
        return "clear" + (" gain" if low > 1.0 else " loss")
    more = (f"; ~{needed} seeds would resolve x{ratio:.2f}" if needed and needed > n
            else "; no effect that seeds could resolve" if needed is None else "")
    return f"no clear effect over {n} seeds{more}"


def _toggle_line(eff: MarginalEffect) -> str:
    """One toggle's own effect: steady state with its interval and what it says, end to end, the budget
    from which it pays, whether learning changed."""
    if eff.effect is None:
        return f"  {eff.label}: no pair of cells to compare" + (f" ({eff.skipped[0]})" if eff.skipped else "")
    said = _evidence(eff.effect, eff.ci_low, eff.ci_high, eff.n_seeds, eff.seeds_needed, eff.why)
    text = f"  {eff.label}: {_short_ratio(eff.effect, eff.ci_low, eff.ci_high, unit='x')} steady ({said}"
    text += ", NOT CLEAN)" if eff.clean is False else ")"
    if eff.end_to_end is not None:
        text += f", {_short_ratio(eff.end_to_end, eff.end_to_end_ci_low, eff.end_to_end_ci_high, unit='x')} end to end"
        if eff.break_even_env_steps is not None and (eff.ci_low or 0.0) > 1.0:  # a clear steady gain, dearer to start
            text += f" (pays from ~{_steps(eff.break_even_env_steps)} env steps)"
    if eff.learning:
        text += f"; learning: {eff.learning}"
    return text


def verdict_lines(report: Report) -> list[str]:
    """The first lines of the terminal summary: each swept toggle's own effect (over the cells that differ only
    in it), then the best cell against its baseline, each with what its interval says."""
    if not (rated := _rated(report)):
        if not report.baseline_spec:
            why = "no baseline: each cell stands alone"
        elif all(c.is_baseline for c in report.cells):
            why = "the sweep has the baseline cell only"
        else:
            why = next((c.ratio_note for c in report.cells if not c.is_baseline and c.ratio_note),
                       "no cell has a ratio")
        return [f"Verdict: no comparison: {why}."]
    lines = []
    if report.marginal_effects:
        lines += ["Each toggle on its own (the cells that differ only in it; 95% intervals over seeds):",
                  *[_toggle_line(e) for e in report.marginal_effects]]
    best = max(rated, key=lambda c: (c.ratio or 0.0, c.label))
    if len(report.marginal_effects) == 1 and len(rated) == 1:  # one toggle, two values: its line said it all
        return lines
    steady, e2e = (_short_ratio(*interval, unit="x") for interval in ratio_intervals(best))
    lead = ("Best combination: " if report.marginal_effects else "Best cell: ") if (best.ratio or 0) > 1.0 else \
        "Nothing beat the baseline; the best: "
    why = (best.ratio_note or "").removeprefix("no interval: ") or None
    said = _evidence(best.ratio, best.ci_low, best.ci_high, best.ci_n or 0, best.seeds_needed, why)
    lines.append(f"{lead}{best.label}: {steady} steady ({said}), "
                 + (f"{e2e} end to end" if e2e != "-" else "no end-to-end ratio")
                 + f"; {', '.join(cell_marks(best, 'LEARNING differs')) or 'clean'}")
    return lines


def _wrap(text: str, width: int, indent: str = "", split_words: bool = True) -> list[str]:
    """``text`` in lines of at most ``width`` characters; a longer word is split unless
    ``split_words`` is False (a path stays whole, to be copied)."""
    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=split_words) or [""]


def _grid(header: list[str], rows: list[list[str]], width: int, colors: list[int | None]) -> list[str]:
    """The table's lines, header first, fitting ``width`` columns: numbers keep their width, the cell label and the
    flags share what is left (a row's longer text wraps onto its next lines), and headers wrap at their spaces only when
    they would not fit whole. ``colors``: per row, the ANSI colour of its label and steady ratio (None: plain)."""
    n = len(header)
    widths = [max([len(r[i]) for r in rows] + [len(header[i])]) for i in range(n)]
    if sum(widths[1:-1]) + 2 * (n - 1) + 12 + len("NOT CLEAN,") > width:
        widths = [max([len(r[i]) for r in rows] + [len(w) for w in header[i].split()]) for i in range(n)]
    room = width - 2 * (n - 1) - sum(widths[1:-1])
    if widths[0] + widths[-1] > room:
        widths[-1] = min(widths[-1], max(len("NOT CLEAN,"), room // 4))
        widths[0] = max(12, room - widths[-1])
    ratio_col = header.index("steady [95% CI]")
    lines = []
    for row, color in zip([header, *rows], [None, *colors]):
        cols = [_wrap(text, widths[i], "    " if i == 0 else "") for i, text in enumerate(row)]
        for k in range(max(len(c) for c in cols)):
            parts = []
            for i, col in enumerate(cols):
                text = col[k] if k < len(col) else ""
                padded = text.ljust(widths[i]) if i in (0, n - 1) else text.rjust(widths[i])
                if k == 0 and i in (0, ratio_col) and color is not None:
                    padded = f"\x1b[1;{color}m{padded}\x1b[0m"
                parts.append(padded)
            lines.append("  ".join(parts).rstrip())
    return lines


def render_table(report: Report, color: bool) -> str:
    """The terminal summary (no trailing newline): verdict first, then a table that fits
    :data:`TERMINAL_WIDTH` columns; with ``color``, the best ratio bold green and the worst bold red.
    The full table (every phase, CI method, graph breaks, return IQR) is summary.md's."""
    header = ["cell", "ok", "steps/s", "steady [95% CI]", "end to end [95% CI]", "compile s", "return", "flags"]
    rows = [[
        ("* " if cell.is_baseline else "  ") + cell.label,
        f"{cell.n_ok}/{cell.n_ok + cell.n_failed + cell.n_missing}",
        _fmt(cell.env_steps_per_s, ".1f"),
        *[_short_ratio(*interval) for interval in ratio_intervals(cell)],
        # the timed jobs' compile seconds, and the cell's cold compile (the preparation's) in brackets
        _fmt(cell.compile_s, ".2f") + (f" ({cell.cold_compile_s:.1f})" if cell.cold_compile_s is not None else ""),
        _fmt(cell.final_return_median, ".4g"),
        # only the marks: their reasons go to the notes under the table
        ", ".join([m.partition(" (")[0] for m in cell_marks(cell)] + (["no ratio"] if _no_ratio(cell) else [])),
    ] for cell in report.cells]
    rated = _rated(report) if color else []  # the best ratio green, the worst red
    best, worst = (f(rated, key=lambda c: c.ratio or 0.0, default=None) for f in (max, min))
    paint = {} if best is worst else {id(best): 32, id(worst): 31}
    counts = report.counts
    expected = f" of {report.expected_jobs} expected" if report.expected_jobs else ""
    text = [
        *verdict_lines(report), "",
        f"Sweep {report.sweep_dir}: {report.n_jobs} jobs{expected} "
        f"({counts['ok']} ok, {counts['failed']} failed, {counts['missing']} missing)",
        "Baseline: " + report.baseline_why,
        "Run order: " + (report.run_order.get("text") or "unknown"), "",
        *_grid(header, rows, TERMINAL_WIDTH, [paint.get(id(cell)) for cell in report.cells]),
        "(* = baseline; ratios > 1 are faster than the baseline; the full table is in summary.md)",
    ]
    if any(c.cold_compile_s is not None for c in report.cells):
        reused = any(c.cold_compile_source and c.cold_compile_source.startswith("reused") for c in report.cells)
        text.append("(compile s: the timed jobs' compile on the warm cache the sweep's preparation filled; in brackets,"
                    " the cell's cold compile on an empty cache" + (", reused from an earlier sweep: summary.md says "
                                                                     "which" if reused else "") + ")")
    if details := _terminal_details(report):
        text += ["", "Notes:", *details]
    out: list[str] = []
    for line in text:  # a painted table line fits by construction (the escapes take no columns)
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += [line] if "\x1b" in line else _wrap(line, TERMINAL_WIDTH, indent, split_words=False)
    return "\n".join(out)


def _no_ratio(cell: CellSummary) -> bool:
    """A cell other than a baseline that has no ratio, and a note why."""
    return cell.ratio is None and bool(cell.ratio_note) and not cell.is_baseline


def _terminal_details(report: Report) -> list[str]:
    """The notes under the terminal table: n/a toggles, missing ratios, flags, casualties."""
    details = [f"  {where}: {text}" for text, where in _not_applicable_groups(report)]
    for cell in report.cells:
        if _no_ratio(cell):
            details.append(f"  {cell.label}: no ratio: {cell.ratio_note}")
        if cell.learning_flag:
            details.append(f"  {cell.label}: LEARNING differs: {cell.learning_note}")
        if why := _unclean(cell):
            details += [f"  {cell.label}: NOT CLEAN: {why}", *[f"      {note}" for note in cell.flag_notes]]
        if cell.break_even_note:
            details.append(f"  {cell.label}: {cell.break_even_note}")
    details += [f"  {cas.cell} (seed {cas.seed}): {cas.status}: {cas.detail}" for cas in report.casualties]
    return details + [f"  {note}" for note in report.notes]


# ---------------------------------------------------------------------------- markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_text(text: Any) -> str:
    """Free text on one markdown line: no line breaks, ``<`` escaped (dynamo writes ``<class ...>``)."""
    return " ".join(str(text).split()).replace("<", "\\<")


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table: the header, its rule, one line per row (every value escaped)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(_md_escape(str(x)) for x in row) + " |" for row in rows]]


def _times(entry: dict[str, Any]) -> str:
    jobs = entry.get("jobs", 1)
    return f"×{entry.get('count', 1)} ({jobs} job{'s' if jobs != 1 else ''})"


def _compile_reason_lines(report: Report) -> list[str]:
    """The "Graph breaks, recompiles and CUDA-graph skips" section: dynamo's reasons per cell and compiled function."""
    lines: list[str] = []
    for cell in report.cells:
        entries: list[str] = []
        for name, fn in cell.compile_reasons.items():
            head = f"- `{name}`: "
            for brk in fn.get("graph_breaks", []):
                where = f"{brk.get('file') or '?'}:{brk.get('line') if brk.get('line') is not None else '?'}"
                func = f" in `{brk['function']}`" if brk.get("function") else ""
                entries.append(f"{head}graph break {_times(brk)} at `{where}`{func}: {_md_text(brk.get('reason'))}")
                if stack := brk.get("stack"):
                    entries.append("  - call chain: " + " → ".join(f"`{f}`" for f in stack))
            for rec in fn.get("recompiles", []):
                frame = f" of `{rec['frame']}`" if rec.get("frame") else ""
                entries.append(f"{head}recompile {_times(rec)}{frame}, guard failed: {_md_text(rec.get('reason'))}")
            if fn.get("cudagraph_skip_count"):
                said = fn.get("cudagraph_skips", [])
                entries.append(f"{head}{fn['cudagraph_skip_count']} graph(s) ran without CUDA graphs"
                               + ("" if said else " (no reason given: inductor skips every graph on a CPU)"))
                entries += [f"  - {_times(skip)}: {_md_text(skip.get('reason'))}" for skip in said]
            if fn.get("reasons_dropped"):
                entries.append(f"{head}{fn['reasons_dropped']} more occurrence(s) of reasons not kept")
        if entries:
            lines += [f"### {_md_escape(cell.label)}", "", *entries, ""]
    if not lines:
        return ["None recorded."]
    intro = (
        "Per cell and compiled function, from dynamo (what `TORCH_LOGS=graph_breaks,recompiles` would "
        "print): identical reasons merged, ×occurrences over the cell's jobs (in how many jobs). A frame "
        "whose compilation gave up and runs eagerly counts as a graph break. Under `reduce-overhead` and "
        "`max-autotune`, a graph that ran without CUDA graphs (the modes' main gain lost) is listed with "
        "inductor's reason."
    )
    return [intro, "", *lines[:-1]]


_MD_CELL_HEADER = [
    "cell", "ok", "failed", "missing", "env_steps_per_s", "ratio", "95% CI", "CI method", "end_to_end_ratio",
    "e2e 95% CI", "wall_s", "flags", *[f"{p} median_ms" for p in PHASES], "compile_s", "cold compile_s", "started as",
    "graph_breaks", "recompiles", "final_return", "learning", "notes"]


def render_markdown(report: Report) -> str:
    """summary.md: cells, toggle effects, learning check, casualties, not-applicable toggles,
    graph breaks and recompiles, fingerprints, method."""
    counts = report.counts
    expects = f" (multirun.yaml expects {report.expected_jobs})" if report.expected_jobs else ""
    spec = spec_text(report.baseline_spec)
    # the cells the spec picked, one per context; named apart only where they say more than the spec
    baselines = "" if report.baseline_labels == [spec] else " → " + ", ".join(f"`{b}`" for b in report.baseline_labels)
    lines = [
        f"# Sweep report: `{report.sweep_dir}`", "",
        f"Jobs: {report.n_jobs}{expects}: {counts['ok']} ok, {counts['failed']} failed "
        f"({counts['interrupted']} interrupted), {counts['missing']} missing.", "",
        f"Baseline: `{spec}`{baselines} (why: {_md_text(report.baseline_why)})", "",
        *_md_verdict(verdict_lines(report)), "",
        "Run order: " + (report.run_order.get("text") or "unknown") + ".", "",
    ]
    fingerprints = sorted({json.dumps(c.fingerprint, sort_keys=True) for c in report.cells if c.fingerprint})
    other = [n for n in report.notes if "fingerprint" not in n]
    sections = {
        "Cells": [
            "Ratios against the baseline: `ratio` = steady state (env steps/s), `end_to_end_ratio` = "
            "whole job (baseline wall_s / cell wall_s); > 1 is faster. A ratio marked *(not clean)* comes "
            "from a cell or baseline with a measurement flag (see below). final_return: median "
            "[interquartile range] over seeds (one seed: over its evaluation episodes).", "",
            *_md_table(_MD_CELL_HEADER, [_md_cell_row(c) for c in report.cells])],
        "Steady state and end to end": _end_to_end_lines(report),
        "Fixed cost per job": _fixed_cost_lines(report),
        "Measurement flags": [model.FLAG_RULE, "", *_flag_lines(report)],
        "Each toggle on its own": _md_effects(report),
        "Learning check": [model.LEARNING_RULE, "", *([f"- **{c.label}**: {c.learning_note}" for c in report.cells
                                                 if c.learning_flag] or ["No cell flagged."])],
        "Casualties": [f"- `{c.cell}` seed {c.seed}: **{c.status}**: {c.detail} ({c.where})"
                       for c in report.casualties] or ["None."],
        "Not-applicable toggles": [f"- {where}: {text}" for text, where in _not_applicable_groups(report)] or ["None."],
        "Graph breaks, recompiles and CUDA-graph skips": _compile_reason_lines(report),
        "Fingerprints": [f"- `{fp}`" for fp in fingerprints] + [f"- {n}" for n in report.notes if "fingerprint" in n]
        or ["No fingerprints recorded."],
        **({"Notes": [f"- {n}" for n in other]} if other else {}),
        "Method": [model.CI_RULE.format(n=report.n_bootstrap, seed=report.bootstrap_seed), "", model.END_TO_END_RULE],
    }
    for title, body in sections.items():
        lines += [f"## {title}", "", *body, ""]
    return "\n".join(lines)


def _md_verdict(lines: list[str]) -> list[str]:
    """The terminal's first lines as markdown: each toggle's line a bullet, the others paragraphs."""
    out: list[str] = []
    for line in lines:
        bullet = line.startswith("  ")
        if out and not (bullet and out[-1].startswith("- ")):
            out.append("")
        out.append(f"- {line.strip()}" if bullet else line)
    return out


def _md_ratios(cell: CellSummary) -> tuple[str, str, str, str, str]:
    """The cell's label (bold for a baseline), its steady ratio (marked when a measurement flag makes it
    not clean) and CI, its end-to-end ratio and CI."""
    (ratio, *ci), (e2e, *e2e_ci) = ratio_intervals(cell)
    return (f"**{cell.label}** (baseline)" if cell.is_baseline else cell.label,
            _fmt(ratio, ".3f") + (" (not clean)" if ratio is not None and cell.ratio_clean is False else ""),
            _ci_text(*ci), _fmt(e2e, ".3f"), _ci_text(*e2e_ci))


def _md_cell_row(cell: CellSummary) -> list[str]:
    notes = [cell.ratio_note] if cell.ratio_note and not cell.is_baseline else []
    notes += [n.replace(": ", " n/a: ", 1) for n in cell.not_applicable]
    label, ratio, ci, e2e, e2e_ci = _md_ratios(cell)
    return [
        label, str(cell.n_ok), str(cell.n_failed), str(cell.n_missing), _fmt(cell.env_steps_per_s, ".1f"), ratio,
        ci, cell.ci_method or "-", e2e, e2e_ci, _fmt(cell.wall_s, ".1f"), ", ".join(cell.flags) or "-",
        *[_fmt(cell.phase_median_ms.get(p), ".4g") for p in PHASES],
        _fmt(cell.compile_s, ".2f"), _fmt(cell.cold_compile_s, ".2f"), "; ".join(cell.start_states) or "-",
        _fmt(cell.graph_breaks, "d"), _fmt(cell.recompiles, "d"), _return_text(cell),
        "FLAG" if cell.learning_flag else ("ok" if cell.learning_flag is False else "-"),
        "; ".join(notes + cell.errors),
    ]


def _md_effects(report: Report) -> list[str]:
    """Each toggle's own effect (the pairs of cells that differ only in it), then the pairs each skipped."""
    if not report.marginal_effects:
        return ["No toggle varies in this sweep."]
    return _md_table(["rank", "change", "steady state", "95% CI", "seeds (needed)", "end to end", "95% CI",
                      "pays beyond (env steps)", "learning", "pairs"], [
        [eff.rank or "-", eff.label, _fmt(eff.effect, ".3f") + (" (not clean)" if eff.clean is False else ""),
         _ci_text(eff.ci_low, eff.ci_high) if eff.ci_low is not None else f"none: {eff.why or '-'}",
         f"{eff.n_seeds}" + (f" ({eff.seeds_needed})" if (eff.seeds_needed or 0) > eff.n_seeds else ""),
         _fmt(eff.end_to_end, ".3f"),
         _ci_text(eff.end_to_end_ci_low, eff.end_to_end_ci_high), _fmt(eff.break_even_env_steps, ",.0f"),
         eff.learning or "-", eff.n_pairs] for eff in report.marginal_effects]
    ) + [f"- {_md_escape(eff.label)}: pair skipped: {skip}" for eff in report.marginal_effects for skip in eff.skipped]


def _end_to_end_lines(report: Report) -> list[str]:
    """Per cell: both ratios with their intervals, wall and fixed time, and the break-even budget;
    then how the jobs started: the sweep's preparation, each cell's cold compile and its jobs' states."""
    rows = [[*_md_ratios(cell), _fmt(cell.wall_s, ".2f"), _fmt(cell.fixed_cost_s, ".2f"),
             _fmt(cell.break_even_env_steps, ",.0f")] for cell in report.cells]
    notes = []
    for cell in report.cells:
        if cell.break_even_note:
            notes.append(f"- **{cell.label}**: {cell.break_even_note}")
        if cell.end_to_end_note and not cell.is_baseline and cell.end_to_end_ratio is None:
            notes.append(f"- {cell.label}: no end-to-end ratio: {cell.end_to_end_note}")
    lines = _md_table(["cell", "ratio (steady state)", "95% CI", "end_to_end_ratio", "95% CI", "wall_s",
                       "fixed cost s", "break-even env steps"], rows) + ([""] + notes if notes else []) + [""]
    if prepared := report.prepared:
        how = ("each compiled cell's cold compile (once, on an empty cache in a fresh process) measured or reused "
               "from an earlier sweep of the same compile, its files shared through compile.cache_dir")
        if prepared.get("in_process"):
            how += ", and every cell ran once in the process that then ran the timed jobs"
        lines.append(f"Prepared before the timed jobs ({prepared.get('launcher')}, "
                     f"{_fmt(prepared.get('prepare_s'), '.1f')} s, untimed): {how}.")
    else:
        lines.append("Not prepared (prepare=false, or a sweep from before rlsweep prepared sweeps): the first job of "
                     "a process and the first compiled job of a cell may carry one-off costs the others do not.")
    for cell in report.cells:
        states = "; ".join(cell.start_states) or "unknown (records without a measurement section)"
        cold = (f"; cold compile {cell.cold_compile_s:.2f} s ({cell.cold_compile_source})"
                if cell.cold_compile_s is not None else "")
        lines.append(f"- {cell.label}: jobs started in a {states}{cold}")
    return lines


def _fixed_cost_lines(report: Report) -> list[str]:
    """What each cell's jobs paid outside steady training, part by part (medians over its ok jobs)."""
    parts = [p for p in FIXED_COST_PARTS if any(c.fixed_cost_parts.get(p) is not None for c in report.cells)]
    if not parts:
        return ["Not recorded (records from before rlsweep broke a job's fixed cost down)."]
    rows = [[cell.label, *[_fmt(cell.fixed_cost_parts.get(p), ".2f") for p in parts], _fmt(cell.compile_s, ".2f"),
             _fmt(cell.fixed_cost_s, ".2f"), _fmt(cell.wall_s, ".2f")] for cell in report.cells]
    return ["Seconds, median over each cell's ok jobs (docs/reference/record.md): `start_s` the job's process "
            "before the job (interpreter, imports, composition; fresh processes only), `warmup_s` the warm-up "
            "iterations with their compile (`compile_s`), `wandb_finish_s` after `wall_s`; `fixed cost s` = wall_s "
            "- env steps / steady rate.", "",
            *_md_table(["cell", *parts, "compile_s", "fixed cost s", "wall_s"], rows)]


def _flag_lines(report: Report) -> list[str]:
    """The flagged cells with their reasons, then each job's drift (first vs last third)."""
    lines = [f"- **{cell.label}** ({why}): " + "; ".join(_md_text(n) for n in cell.flag_notes)
             for cell in report.cells if (why := _unclean(cell))]
    lines = lines or ["No cell flagged: every ratio above is clean by these checks."]
    if drift := [(c, d) for c in report.cells for d in c.job_drift]:
        lines += ["", "Drift within each job (median per-iteration env steps/s, first vs last third of "
                  "its steady iterations):", "", *_md_table(
                      ["cell", "seed", "iterations", "first third", "last third", "last / first",
                       "noise could explain", "drift", "rate uncertainty (2 SE)", "noisy"],
                      [[cell.label, d["seed"], d["n_iterations"], f"{d['first_third']:.4g}", f"{d['last_third']:.4g}",
                        f"{d['drift']:.3f}", f"±{d['noise']:.4g}", "yes" if d["flagged"] else "no",
                        f"±{d['rate_uncertainty']:.0%}", "yes" if d["noisy"] else "no"] for cell, d in drift])]
    return lines


# ------------------------------------------------------------------ per-cell summary table


def summary_table(report: Report) -> tuple[list[str], list[list[Any]]]:
    """The per-cell summary: column names and one row of raw values per cell.

    The columns of summary.csv and of the W&B ``report/cells`` table. Values are Python
    values (None, bool, int, float, str, or a list for per-seed values).
    """
    columns = [
        "cell", *report.varied_dims, "is_baseline", "baseline_cell", "n_ok", "n_failed", "n_interrupted", "n_missing",
        "seeds_ok", "env_steps_per_s", "env_steps_per_s_seeds", "updates_per_s", "ratio", "ci_low", "ci_high",
        "ci_method", "ci_n", "seeds_needed", "ratio_note", "ratio_clean", "flags", "flag_notes", "end_to_end_ratio",
        "end_to_end_ci_low", "end_to_end_ci_high", "end_to_end_ci_method", "end_to_end_note", "wall_s", "wall_s_seeds",
        "fixed_cost_s", "break_even_env_steps", *[f"{p}_median_ms" for p in PHASES], *[f"{p}_total_s" for p in PHASES],
        "compile_s", "cold_compile_s", "cold_compile_source", "start_states", "graph_breaks", "recompiles",
        "final_return_median", "final_return_spread", "final_return_spread_kind", "final_return_q25",
        "final_return_q75", "final_return_iqr_over", "final_return_iqm", "final_return_iqm_ci", "p_improvement",
        "p_improvement_ci", "p_improvement_paired", "same_numbers", "learning_flag", "learning_note", "not_applicable",
        "fingerprint_note", "errors",
    ]
    values: list[dict[str, Any]] = [{  # the cell's own fields where no column of the same name says otherwise
        **vars(cell), **cell.varied, "cell": cell.label, "baseline_cell": cell.baseline_label,
        **{f"{p}_median_ms": cell.phase_median_ms.get(p) for p in PHASES},
        **{f"{p}_total_s": cell.phase_total_s.get(p) for p in PHASES},
    } for cell in report.cells]
    return columns, [[cell.get(name) for name in columns] for cell in values]


def effects_table(report: Report) -> tuple[list[str], list[list[Any]]]:
    """The marginal effects: column names and one row of raw values per toggle change."""
    columns = ["rank", "change", "toggle", "from_value", "to_value", "effect", "ci_low", "ci_high", "ci_method",
               "why", "n_seeds", "seeds_needed", "end_to_end", "end_to_end_ci_low", "end_to_end_ci_high",
               "break_even_env_steps", "learning", "n_pairs", "skipped"]
    rows = [[eff.label if c == "change" else getattr(eff, c) for c in columns] for eff in report.marginal_effects]
    return columns, rows


def cell_text(value: Any) -> str:
    """A summary-table value as CSV text: "" for None/non-finite, lists joined by ";"."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, (list, tuple)):
        return ";".join(cell_text(v) for v in value)
    return str(value)


def render_csv(report: Report) -> str:
    """summary.csv: :func:`summary_table` as text."""
    columns, rows = summary_table(report)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([columns, *([cell_text(v) for v in row] for row in rows)])
    return buf.getvalue()
