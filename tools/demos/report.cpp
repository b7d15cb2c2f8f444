#include "tools/demos/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/error.h"
#include "tools/json.h"

namespace minfer::demo {

using cli::json_number;
using cli::json_string;

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
  std::filesystem::create_directories(out_dir);
  const std::string path = out_dir + "/" + name_ + ".json";
  std::ofstream out(path);
  MINFER_CHECK(out.good(), "demo ", name_, ": cannot write ", path);
  out << "{\"demo\": " << json_string(name_) << ", \"title\": " << json_string(title_) << ", \"x\": " << json_string(x_)
      << ", \"y\": " << json_string(y_) << ", \"xlog\": " << (xlog_ ? "true" : "false")
      << ", \"ylog\": " << (ylog_ ? "true" : "false") << ",\n \"halves\": {";
  for (size_t i = 0; i < halves_.size(); ++i)
    out << (i ? ", " : "") << json_string(halves_[i].first) << ": " << json_string(halves_[i].second);
  out << "},\n \"conclusions\": [";
  for (size_t i = 0; i < conclusions_.size(); ++i)
    out << (i ? ", " : "") << "{\"half\": " << json_string(conclusions_[i].first)
        << ", \"text\": " << json_string(conclusions_[i].second) << "}";
  out << "],\n \"rows\": [\n";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    out << "  {\"half\": " << json_string(r.half) << ", \"series\": " << json_string(r.series)
        << ", \"x\": " << json_number(r.x) << ", \"y\": " << json_number(r.y) << ", \"label\": " << json_string(r.label)
        << "}" << (i + 1 < rows_.size() ? "," : "") << "\n";
  }
  out << " ]}\n";
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
  return make_backend(DeviceKind::cpu, options);
}

std::unique_ptr<Backend> cuda_backend(GemmKind gemm, bool graphs) {
  BackendOptions options;
  options.gemm = gemm;
  options.graphs = graphs;
  return make_backend(DeviceKind::cuda, options);
}

}  // namespace minfer::demo
