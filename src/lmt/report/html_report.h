// The HTML report of one or more runs (`lmtrain report`): a single self-contained file — inline CSS,
// inline SVG plots (svg_plot.h), one small inline script that checks the page — with no network
// access and no external files.
//
// Contents: a summary table per run (steps, tokens, final and smoothed loss, best val loss, tok/s,
// MFU, wall time, model, version, commit); plots (each only when some run has its data): loss raw +
// smoothed and val loss against tokens; lr, grad norm, tokens/s (raw + smoothed), MFU (%), memory
// (RSS and arena peak, MiB) against step; eval accuracies against tokens; stability events (skipped
// and spike steps on the loss curve); a table of events; per run the machine, peaks, world layout,
// the resolved config (escaped) and links to its checkpoints, relative to the report's directory.
// Several runs overlay their curves, one colour per run.
//
// Self-check: the inline script counts, in every <svg class="plot">, the path vertices and dots
// and compares them with its data-points attribute; all equal and non-zero sets document.title to
// "ok", else to "error: ..." naming the plot. A headless browser reads the title (tests/report).
#pragma once

#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/report/run_data.h"
#include "lmt/report/svg_plot.h"

namespace lmt::report {

// The plots of `runs`, in report order, without the empty ones.
std::vector<Plot> report_plots(const std::vector<RunData>& runs);

// The whole page; checkpoint links are relative to directory `out_dir`.
std::string render_report(const std::vector<RunData>& runs, const std::string& out_dir);

// Renders and writes `out_path` atomically (a reader never sees half a page; an existing report
// is replaced only by a complete one).
Status write_report(const std::vector<RunData>& runs, const std::string& out_path);

// The CSS colour of run `i` (a fixed palette, repeating after 8).
std::string run_color(size_t i);

}  // namespace lmt::report
