// What every demo shares: its options, timing by median of repetitions, the printed tables and
// conclusions, and the JSON file (NAME.json) that tools/plot_demos.py turns into NAME.png.
//
// JSON: {"demo": NAME, "title": ..., "x": label, "y": label, "xlog": bool, "ylog": bool,
//        "halves": {"cpu": "ran" | "skipped: ...", "cuda": ...},
//        "conclusions": [{"half": ..., "text": ...}],
//        "rows": [{"half": "cpu", "series": "sorted", "x": 1024, "y": 2.5, "label": ...}]}
// A plotted line is one (half, series); rows without an x are drawn as bars.
#pragma once

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/decoder.h"

namespace minfer::demo {

struct Options {
  bool quick = false;        // smaller sizes: every CPU half within seconds
  std::string out_dir = "results";
  int threads = 0;           // CPU threads, 0 = every core
  bool cuda = false;         // a CUDA device is usable (the GPU halves run)
  std::string cuda_reason;   // why not, when not
  // The model of the lessons that run one (sequential, launch, batching, bytes, continuous,
  // speculative, prompt-cache, paged-kv), any -m a user has; empty: each lesson's own preset, chosen for
  // what it shows.
  std::string model;
  const std::string& model_or(const std::string& preset) const { return model.empty() ? preset : model; }
};

// Median seconds of `reps` timed runs of `fn` after one untimed run; `sync` waits for the device.
double median_seconds(int reps, const std::function<void()>& fn, const std::function<void()>& sync = nullptr);

// Median seconds of 3 timed runs (after one untimed) of `steps` decode steps of one sequence after
// a one-token prompt; `decoder` holds at least steps + 1 positions.
double median_decode_seconds(Decoder& decoder, Backend& backend, int steps);

class Report {
 public:
  Report(std::string name, std::string title);
  void axes(std::string x, std::string y, bool xlog, bool ylog);
  // A point of a plotted series; `label` names it in tables and bar charts.
  void point(const std::string& half, const std::string& series, double x, double y, const std::string& label = "");
  void bar(const std::string& half, const std::string& label, double y) { point(half, label, NAN, y, label); }
  void ran(const std::string& half) { halves_.push_back({half, "ran"}); }
  void skipped(const std::string& half, const std::string& reason);  // prints "skipped: ..."
  void conclude(const std::string& half, const std::string& text);   // prints it, keeps it
  void write(const std::string& out_dir) const;                      // out_dir/NAME.json
  const std::string& name() const { return name_; }

 private:
  struct Row {
    std::string half, series, label;
    double x, y;
  };
  std::string name_, title_, x_, y_;
  bool xlog_ = false, ylog_ = false;
  std::vector<Row> rows_;
  std::vector<std::pair<std::string, std::string>> halves_, conclusions_;
};

// Prints a markdown table.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string fmt(const char* format, double value);  // fmt("%.2f", x)

// A CPU or CUDA backend for a demo half.
std::unique_ptr<Backend> cpu_backend(const Options& o);
std::unique_ptr<Backend> cuda_backend(GemmKind gemm = GemmKind::cublas, bool graphs = true);

}  // namespace minfer::demo
