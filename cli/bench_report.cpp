#include "cli/bench_report.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

namespace minfer::cli {

namespace {

std::string human_count(uint64_t n) {
  char text[32];
  if (n >= 1000000000ull) std::snprintf(text, sizeof(text), "%.2fB", double(n) / 1e9);
  else if (n >= 1000000ull) std::snprintf(text, sizeof(text), "%.2fM", double(n) / 1e6);
  else std::snprintf(text, sizeof(text), "%.1fK", double(n) / 1e3);
  return text;
}

std::string human_bytes(uint64_t n) {
  char text[32];
  if (n >= (1ull << 30)) std::snprintf(text, sizeof(text), "%.2f GiB", double(n) / double(1ull << 30));
  else std::snprintf(text, sizeof(text), "%.2f MiB", double(n) / double(1ull << 20));
  return text;
}

}  // namespace

void mean_stddev(const std::vector<double>& samples, double* mean, double* stddev) {
  double sum = 0.0;
  for (double s : samples) sum += s;
  *mean = samples.empty() ? 0.0 : sum / double(samples.size());
  double squares = 0.0;
  for (double s : samples) squares += (s - *mean) * (s - *mean);
  *stddev = samples.size() > 1 ? std::sqrt(squares / double(samples.size() - 1)) : 0.0;
}

double BenchRow::roofline_fraction() const {
  if (decode()) return roofline_gbps > 0 ? gbps / roofline_gbps : 0.0;
  return roofline_gflops > 0 ? gflops / roofline_gflops : 0.0;
}

std::string BenchRow::achieved() const {
  char text[128];
  if (generation()) {
    if (draft == "none") return "1 token per target pass";
    std::snprintf(text, sizeof(text), "%.2f tokens per target pass, %.0f%% of drafts accepted", tokens_per_pass,
                  100.0 * acceptance);
    return text;
  }
  const double value = decode() ? gbps : gflops;
  const double ceiling = decode() ? roofline_gbps : roofline_gflops;
  const char* unit = decode() ? "GB/s" : "GFLOP/s";
  const std::string level = decode() && !roofline_level.empty() ? roofline_level + " " : "";
  if (ceiling > 0)
    std::snprintf(text, sizeof(text), "%.1f %s = %.0f%% of %s%.1f", value, unit, 100.0 * value / ceiling,
                  level.c_str(), ceiling);
  else
    std::snprintf(text, sizeof(text), "%.1f %s", value, unit);
  return over_reason.empty() ? text : std::string(text) + " (" + over_reason + ")";
}

void print_markdown_header(FILE* out) {
  std::fprintf(out, "| model | params | size | device | dtype | threads | kernels | B | test | t/s | achieved (of roofline) |\n");
  std::fprintf(out, "| ----- | -----: | ---: | ------ | ----- | ------: | ------- | -: | ---- | --: | ---------------------- |\n");
}

void print_markdown_row(FILE* out, const BenchRow& r) {
  std::string kernels = r.kernels + (r.graphs.empty() ? "" : ", graphs " + r.graphs);
  if (r.device == "cuda" && r.gemm != "cublas") kernels += ", gemm " + r.gemm;
  std::fprintf(out, "| %s | %s | %s | %s | %s | %d | %s | %lld | %s | %.2f ± %.2f | %s |\n", r.model.c_str(),
               human_count(r.n_params).c_str(), human_bytes(r.model_bytes).c_str(), r.device.c_str(),
               r.dtype.c_str(), r.threads, kernels.c_str(), static_cast<long long>(r.batch),
               (r.test + (r.generation() ? " generate, draft " + r.draft : "")).c_str(), r.avg_ts, r.stddev_ts,
               r.achieved().c_str());
  std::fflush(out);
}

void print_csv_header(FILE* out) {
  std::fprintf(out, "model,n_params,model_bytes,device,dtype,threads,kernels,gemm,graphs,batch,test,n_prompt,"
                    "n_gen,avg_ts,stddev_ts,bytes_per_step,gbps,gflops,roofline_level,roofline_gbps,roofline_gflops,build_commit,draft,acceptance,tokens_per_pass\n");
}

void print_csv_row(FILE* out, const BenchRow& r) {
  std::fprintf(out, "%s,%llu,%llu,%s,%s,%d,%s,%s,%s,%lld,%s,%lld,%lld,%.4f,%.4f,%llu,%.4f,%.4f,%s,%.4f,%.4f,%s,%s,%.4f,%.4f\n",
               r.model.c_str(), static_cast<unsigned long long>(r.n_params),
               static_cast<unsigned long long>(r.model_bytes), r.device.c_str(), r.dtype.c_str(), r.threads,
               r.kernels.c_str(), r.gemm.c_str(), r.graphs.c_str(), static_cast<long long>(r.batch), r.test.c_str(),
               static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_gen), r.avg_ts, r.stddev_ts,
               static_cast<unsigned long long>(r.bytes_per_step), r.gbps, r.gflops, r.roofline_level.c_str(), r.roofline_gbps,
               r.roofline_gflops, r.build_commit.c_str(), r.draft.c_str(), r.acceptance, r.tokens_per_pass);
  std::fflush(out);
}

std::string to_json(const std::vector<BenchRow>& rows) {
  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  for (const BenchRow& r : rows) {
    nlohmann::ordered_json levels = nlohmann::ordered_json::array();
    for (const MemoryLevel& l : r.roofline_levels)
      levels.push_back({{"name", l.name}, {"capacity_bytes", l.capacity_bytes}, {"read_gbps", l.read_gbps},
                        {"probe_bytes", l.probe_bytes}});
    records.push_back({{"model", r.model}, {"n_params", r.n_params}, {"model_bytes", r.model_bytes},
                       {"device", r.device}, {"device_name", r.device_name}, {"dtype", r.dtype},
                       {"kv_dtype", r.kv_dtype}, {"threads", r.threads}, {"kernels", r.kernels}, {"gemm", r.gemm}, {"graphs", r.graphs},
                       {"batch", r.batch}, {"test", r.test}, {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen}, {"n_depth", r.n_depth},
                       {"avg_ts", r.avg_ts}, {"stddev_ts", r.stddev_ts}, {"samples_ts", r.samples_ts},
                       {"bytes_per_step", r.bytes_per_step}, {"gbps", r.gbps}, {"gflops", r.gflops},
                       {"roofline_level", r.roofline_level},
                       {"roofline_level_bytes", r.roofline_level_bytes}, {"roofline_gbps", r.roofline_gbps},
                       {"roofline_gflops", r.roofline_gflops}, {"roofline_fraction", r.roofline_fraction()},
                       {"roofline_over", r.over_reason}, {"roofline_levels", levels}, {"build_commit", r.build_commit},
                       {"draft", r.draft}, {"acceptance", r.acceptance}, {"tokens_per_pass", r.tokens_per_pass},
                       {"ranks", r.ranks}, {"all_reduces_per_step", r.all_reduces_per_step},
                       {"all_reduce_bytes_per_step", r.all_reduce_bytes_per_step},
                       {"all_reduce_seconds_per_step", r.all_reduce_seconds_per_step},
                       {"roofline_all_reduce_seconds", r.roofline_all_reduce_seconds}});
  }
  return records.dump(1) + "\n";  // non-finite numbers are written as null
}

}  // namespace minfer::cli
