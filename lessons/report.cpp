#include "lessons/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

namespace minfer::demo {

double median_seconds(int reps, const std::function<void()>& fn, const std::function<void()>& sync) {
  fn();
  if (sync) sync();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    fn();
    if (sync) sync();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

double median_decode_seconds(Decoder& decoder, Backend& backend, int steps) {
  return median_seconds(3, [&] {
    decoder.reset();
    decoder.prefill({{1}});
    for (int i = 0; i < steps; ++i) decoder.decode({static_cast<int32_t>(3 + i)});
  }, [&] { backend.synchronize(); });
}

Report::Report(std::string name, std::string title) : name_(std::move(name)), title_(std::move(title)) {
  std::printf("\n## demo %s: %s\n\n", name_.c_str(), title_.c_str());
}

void Report::axes(std::string x, std::string y, bool xlog, bool ylog) {
  x_ = std::move(x);
  y_ = std::move(y);
  xlog_ = xlog;
  ylog_ = ylog;
}

void Report::point(const std::string& half, const std::string& series, double x, double y, const std::string& label) {
  rows_.push_back({half, series, label, x, y});
}

void Report::skipped(const std::string& half, const std::string& reason) {
  halves_.push_back({half, "skipped: " + reason});
  std::printf("%s half: skipped: %s\n", half.c_str(), reason.c_str());
}

void Report::conclude(const std::string& half, const std::string& text) {
  conclusions_.push_back({half, text});
  std::printf("\n%s conclusion: %s\n\n", half.c_str(), text.c_str());
}

void Report::write(const std::string& out_dir) const {
  nlohmann::ordered_json halves = nlohmann::ordered_json::object(), conclusions = nlohmann::ordered_json::array(),
                         rows = nlohmann::ordered_json::array();
  for (const auto& [half, state] : halves_) halves[half] = state;
  for (const auto& [half, text] : conclusions_) conclusions.push_back({{"half", half}, {"text", text}});
  for (const Row& r : rows_)  // a bar's missing x is NaN, written as null
    rows.push_back({{"half", r.half}, {"series", r.series}, {"x", r.x}, {"y", r.y}, {"label", r.label}});
  nlohmann::ordered_json doc = {{"demo", name_}, {"title", title_}, {"x", x_}, {"y", y_}, {"xlog", xlog_},
                                {"ylog", ylog_}, {"halves", halves}, {"conclusions", conclusions}, {"rows", rows}};
  const std::string path = out_dir + "/" + name_ + ".json";
  write_file_atomic(path, doc.dump(1) + "\n");
  std::printf("wrote %s\n", path.c_str());
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const auto& c : cells) s += " " + c + " |";
    std::printf("%s\n", s.c_str());
  };
  line(header);
  std::vector<std::string> rule(header.size(), "---");
  line(rule);
  for (const auto& r : rows) line(r);
  std::fflush(stdout);
}

std::string fmt(const char* format, double value) {
  std::string text(64, '\0');
  int n = std::snprintf(text.data(), text.size(), format, value);
  if (n >= static_cast<int>(text.size())) {
    text.resize(static_cast<size_t>(n) + 1);
    std::snprintf(text.data(), text.size(), format, value);
  }
  text.resize(static_cast<size_t>(std::max(n, 0)));
  return text;
}

std::unique_ptr<Backend> cpu_backend(const Options& o) {
  BackendOptions options;
  options.threads = o.threads;
  return make_backend(BackendKind::cpu, options);
}

std::unique_ptr<Backend> cuda_backend(GemmKind gemm, bool graphs) {
  BackendOptions options;
  options.gemm = gemm;
  options.graphs = graphs;
  return make_backend(BackendKind::cuda, options);
}

}  // namespace minfer::demo
