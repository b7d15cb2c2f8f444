// Rows of `minfer bench` and their three output formats: a markdown table (llama-bench's
// columns plus the roofline), CSV, and JSON records for tools/plot_bench.py.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/roofline.h"

namespace minfer::cli {

struct BenchRow {
  std::string model;
  uint64_t n_params = 0;
  uint64_t model_bytes = 0;
  std::string device;   // "cpu" or "cuda"
  std::string device_name;
  std::string dtype;
  std::string kv_dtype;  // the KV cache's type
  int threads = 0;
  int64_t batch = 1;
  std::string test;     // "pp512", "tg128"
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  int64_t n_depth = 0;  // positions already in the cache when the timed tokens start (-d)
  std::string kernels;  // "fused" or "unfused"
  std::string gemm;
  std::string graphs;   // "on", "off" or "" where it does not apply
  std::vector<double> samples_ts;
  double avg_ts = 0.0, stddev_ts = 0.0;
  uint64_t bytes_per_step = 0;  // tg: average over the steps; pp: one pass over the weights + cache
  double gbps = 0.0;            // bytes_per_step x steps per second
  double gflops = 0.0;
  // The measured ceilings (--roofline; 0 and empty otherwise). A decode row is compared with the
  // memory level its bytes per step fit in (engine/roofline.h), a prefill row with the matmul peak.
  double roofline_gbps = 0.0;    // the read bandwidth of that level
  std::string roofline_level;    // its name: "L2", "L3", "DRAM", "HBM"
  uint64_t roofline_level_bytes = 0;  // its capacity for the threads in use; 0 for main memory
  double roofline_gflops = 0.0;
  std::vector<MemoryLevel> roofline_levels;  // every level, for the plots
  std::string over_reason;       // why the row reads over 100% of its ceiling, when it does
  std::string build_commit;
  // A generation row of --draft (greedy generation of n_gen tokens after a fixed prompt; the
  // rate counts the decode tokens): "none" for plain generation through the same loop,
  // "q8_0 model, k=4" or "ngram, k=4" with speculation; empty for the ordinary rows.
  std::string draft;
  double acceptance = 0.0;       // accepted / drafted tokens
  double tokens_per_pass = 0.0;  // decode tokens per target forward pass
  // Split over ranks (mpirun): their count, and a decode row's all-reduces a step on rank 0 (the
  // last repetition's mean); 1 and zeros without mpirun, zeros for a prefill row.
  int ranks = 1;
  double all_reduces_per_step = 0.0, all_reduce_bytes_per_step = 0.0, all_reduce_seconds_per_step = 0.0;
  // With --roofline over ranks, the communication row: one all-reduce of batch x dim f32, measured
  // (measure_all_reduce_seconds); 0 otherwise.
  double roofline_all_reduce_seconds = 0.0;

  bool decode() const { return n_gen > 0; }
  bool generation() const { return !draft.empty(); }
  // The rate that matters for the row and, with --roofline, its fraction of the measured
  // ceiling: "71.3 GB/s = 87% of DRAM 82.0" (decode) or "245.1 GFLOP/s = 61% of 401.7" (prefill),
  // followed by the reason where a row reads over 100%; without a roofline just the rate. A
  // generation row gives its tokens per target pass and acceptance instead.
  std::string achieved() const;
  double roofline_fraction() const;  // 0 when no roofline was measured
};

// Mean and sample standard deviation.
void mean_stddev(const std::vector<double>& samples, double* mean, double* stddev);

void print_markdown_header(FILE* out);
void print_markdown_row(FILE* out, const BenchRow& row);
void print_csv_header(FILE* out);
void print_csv_row(FILE* out, const BenchRow& row);
std::string to_json(const std::vector<BenchRow>& rows);

}  // namespace minfer::cli
