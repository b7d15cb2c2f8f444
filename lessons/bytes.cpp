// demo bytes: decode speed is bytes per token against bandwidth. One model decodes one sequence
// with its weights stored as f32 (4 bytes a weight), f16 and bf16 (2), q8_0 (34 bytes per 32
// weights: 1.0625), GGUF's q6_k (210 bytes per 256: 0.82), the mixes of the files people download,
// q5_k_m and q4_k_m (q5_k, 176 per 256, or q4_k, 144, with the classifier and some layers' wv and
// w2 in q6_k: model/llama_config.h), and q4_0 (18 per 32: 0.56) (the presets' K-quant weights are
// random blocks, which cost the same bytes). A decode step reads every weight once, so the ceiling is
//   tokens/s <= read bandwidth / bytes per step,
// and bytes per step is almost exactly the parameter count times bytes per weight (the norms, one
// embedding row and the KV cache read add little at short contexts). How close the measured
// points stay to it says how much of the step is the product of each weight with the activations,
// and how much is everything else (attention, element-wise ops, the conversion of 16- and 8-bit
// weights to arithmetic the core can do).
//
// Which bandwidth? That of the memory level the step's bytes live in (engine/roofline.h). The
// lesson runs two models:
//   - one larger than the caches: stories110M's shape with as many layers as make even its q8_0
//     weights 4x the last cache (preset_at_least; its 4.5-bit weights are still over 2x), so every
//     dtype streams from DRAM and tokens/s follows bytes per weight (--quick: its f32 weights);
//   - one smaller than the last cache (the largest llama2.c preset whose f32 weights fit in half
//     of it; none on a 32 MiB L3 or a GPU's L2), read from the cache: faster than DRAM allows, and
//     no longer in proportion to bytes, since halving bytes that were never DRAM's to read saves
//     less. That is what caches buy.
// The plot gives each point's achieved GB/s against its bytes per step, under every level's
// measured bandwidth as a horizontal line.
#include <algorithm>

#include "engine/decoder.h"
#include "engine/roofline.h"
#include "engine/serve_trace.h"
#include "lessons/demos.h"
#include "model/llama.h"
#include "model/llama_cost.h"
#include "model/presets.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

struct Line {
  std::string name;  // "larger than the caches", "cache-resident"
  std::string spec;
};

// The largest llama2.c-shaped preset whose f32 weights fit in half the last cache; empty when none
// of the stories models does (preset:tiny would, but its steps are all overhead, not bytes).
std::string cache_resident_spec(const Roofline& roof) {
  const uint64_t room = last_cache_bytes(roof.levels) / 2;
  for (const char* name : {"stories110M", "stories42M", "stories15M"})
    if (LlamaModel::weight_bytes(find_preset(name).config, DType::f32) <= room) return std::string("preset:") + name;
  return "";
}

// Whether every matrix of `c` takes the type asked for: none falls back (matrix_dtype) for rows
// that are not whole blocks (a mix's q6_k has the same 256 as its base).
bool whole_blocks(const LlamaConfig& c, const WeightTypes& t) {
  for (int64_t in : {c.dim, c.hidden_dim, c.q_dim(), c.expert_hidden_dim, c.shared_expert_hidden_dim})
    if (in > 0 && matrix_dtype(t.base, in) != t.base) return false;
  return true;
}

struct Point {
  WeightTypes dtype;
  uint64_t step_bytes;
  double tokens_per_second;  // the median over the rounds
  double speedup;            // against the line's first dtype: the median of the per-round ratios
  double gbps() const { return tokens_per_second * double(step_bytes) / 1e9; }
};

// Decodes `line`'s model with each dtype's weights, `rounds` times in turn (f32, f16, ..., f32,
// f16, ...); plots each point's GB/s against its bytes per step and adds a table row per dtype.
// note: rounds of every dtype in turn, each figure the median of its rounds and each ratio the
// median of the ratios within a round: on shared cores the host's speed drifts over a minute (the
// same f32 decode read 62% and 94% of DRAM in two runs five minutes apart on a Zen 4 VM), and one
// pass per dtype put that drift into the ratios. Each model is loaded again every round, so that
// only one is in memory at a time (f32 weights of 4x a 260 MiB L3 are 4 GB).
std::vector<Point> run_line(Report& r, const std::string& half, Backend& backend, const Roofline& roof,
                            const Line& line, const std::vector<WeightTypes>& dtypes, int steps, int rounds,
                            std::vector<std::vector<std::string>>* rows) {
  std::vector<WeightTypes> measured;
  std::vector<uint64_t> step_bytes;
  std::vector<std::vector<double>> seconds;  // [dtype][round]
  std::vector<WeightTypes> refused;
  for (int round = 0; round < rounds; ++round) {
    size_t i = 0;
    for (const WeightTypes& dtype : dtypes) {
      if (std::find(refused.begin(), refused.end(), dtype) != refused.end()) continue;
      LlamaOptions options;
      options.dtype = dtype;
      auto model = load_model(line.spec, backend, options);
      if (!whole_blocks(model->config(), dtype)) {
        refused.push_back(dtype);
        std::printf("%s, %s: %s's rows are not whole %s blocks (%s): not in the table\n", half.c_str(),
                    dtype.name().c_str(), line.spec.c_str(), dtype_name(dtype.base), model->info().weight_types.c_str());
        continue;
      }
      DecoderOptions dec;
      dec.n_ctx = steps + 1;
      Decoder decoder(*model, dec);
      if (round == 0) {
        measured.push_back(dtype);
        step_bytes.push_back(decode_step_bytes(model->info(), model->config(), decoder.cache().dtype(), 1, steps / 2));
        seconds.emplace_back();
      }
      seconds[i++].push_back(median_decode_seconds(decoder, backend, steps));
    }
  }
  std::vector<Point> points;
  for (size_t i = 0; i < measured.size(); ++i) {
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) ratios.push_back(seconds[0][size_t(round)] / seconds[i][size_t(round)]);
    const Point p{measured[i], step_bytes[i], double(steps) / summarize(seconds[i]).median, summarize(ratios).median};
    const MemoryLevel& level = roof.level_for(p.step_bytes);
    r.point(half, "measured, " + line.name, double(p.step_bytes) / 1e6, p.gbps(), p.dtype.name());
    rows->push_back({line.name + " (" + line.spec + ")", p.dtype.name(), fmt("%.1f", double(p.step_bytes) / 1e6),
                     level.name, fmt("%.1f", p.tokens_per_second),
                     fmt("%.1f", level.read_gbps * 1e9 / double(p.step_bytes)), fmt("%.1f", p.gbps()),
                     fmt("%.0f%%", 100 * p.gbps() / level.read_gbps), i == 0 ? "-" : fmt("%.2fx", p.speedup)});
    points.push_back(p);
  }
  return points;
}

// "f16 reads 2.00x fewer bytes per step than f32 and decodes 1.93x faster, ..." for every point
// after the first (bytes per step: a mix's weights have no one size).
std::string speedups(const std::vector<Point>& points) {
  const Point& base = points.front();
  std::string text;
  for (size_t i = 1; i < points.size(); ++i)
    text += (i > 1 ? ", " : "") + points[i].dtype.name() +
            fmt(" reads %.2fx fewer bytes per step", double(base.step_bytes) / double(points[i].step_bytes)) + " than " +
            base.dtype.name() + fmt(" and decodes %.2fx faster", points[i].speedup);
  return text;
}

// "; q8_0 reads 72% of f32's GB/s, ..." for the points that read under 90% of the first one's GB/s
// (each ratio the point's speedup times its bytes over the first one's, so that it agrees with the
// speedup the conclusion quotes): their tokens/s fall short of the byte ratio because the loop
// that widens or dequantizes the weights, more vector work per byte than f32's, binds before the
// memory does.
std::string slower_streams(const std::vector<Point>& points) {
  const Point& base = points.front();
  std::string names;
  for (size_t i = 1; i < points.size(); ++i) {
    const double share = points[i].speedup * double(points[i].step_bytes) / double(base.step_bytes);
    if (share < 0.9)
      names += (names.empty() ? "" : ", ") + points[i].dtype.name() + fmt(" reads %.0f%%", 100 * share);
  }
  if (names.empty()) return "";
  return "; " + names + " of " + base.dtype.name() +
         "'s GB/s: converting the weights costs more vector work per byte than f32's loop, and binds before the "
         "memory does (bench/results/NOTES.md)";
}

// The levels as horizontal lines across the plotted range of bytes per step.
void plot_levels(Report& r, const std::string& half, const Roofline& roof, const std::vector<std::vector<Point>>& lines) {
  double lo = 1e300, hi = 0;
  for (const auto& line : lines)
    for (const Point& p : line) {
      lo = std::min(lo, 0.5 * double(p.step_bytes) / 1e6);
      hi = std::max(hi, 2.0 * double(p.step_bytes) / 1e6);
    }
  for (const MemoryLevel& level : roof.levels) {
    const std::string name = "level " + level.name + fmt(" %.1f GB/s", level.read_gbps);
    r.point(half, name, lo, level.read_gbps);
    r.point(half, name, hi, level.read_gbps);
  }
}

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& user_model, int steps,
              bool quick) {
  const std::vector<WeightTypes> dtypes = {DType::f32,  DType::f16,
                                           DType::bf16, DType::q8_0,
                                           DType::q6_k, WeightTypes::k_mix_of(DType::q5_k),
                                           WeightTypes::k_mix_of(DType::q4_k), DType::q4_0};
  const Roofline roof = measure_roofline(backend, DType::f32);
  std::printf("%s ceilings measured: %s\n", half.c_str(), roof.describe().c_str());
  std::vector<Line> lines;
  if (!user_model.empty()) {
    lines.push_back({"your model", user_model});
  } else {
    // note: --quick sizes the model by its f32 weights, a quarter of the layers: a smoke run, in
    // which the q8_0 weights are only about the last cache's size (the table names their level).
    // note: on a GPU at least 2 GiB: a model of 4x a 50 MiB L2 takes well under a millisecond a
    // step, where kernel launches, not bytes, set the pace.
    const uint64_t min_bytes = std::max<uint64_t>(kMainOverLastCache * last_cache_bytes(roof.levels),
                                                  backend.device() == DeviceKind::cuda ? uint64_t(2) << 30 : 0);
    const Preset big = preset_at_least("stories110M", min_bytes, quick ? DType::f32 : DType::q8_0);
    lines.push_back({"larger than the caches", "preset:" + big.name});
    const std::string resident = cache_resident_spec(roof);
    if (resident.empty())
      std::printf("%s: no llama2.c preset's f32 weights fit in half the last cache (%.0f MiB): no cache-resident line\n",
                  half.c_str(), double(last_cache_bytes(roof.levels)) / double(1 << 20));
    else
      lines.push_back({"cache-resident", resident});
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::vector<Point>> measured;
  const int rounds = quick ? 1 : 3;
  for (const Line& line : lines) measured.push_back(run_line(r, half, backend, roof, line, dtypes, steps, rounds, &rows));
  std::printf("%s: one sequence, %d decode steps; every dtype in turn, %d round%s (tokens/s: medians of the rounds; vs "
              "f32: medians of the per-round ratios)\n",
              half.c_str(), steps, rounds, rounds == 1 ? "" : "s");
  print_table({"model", "weights", "MB per step", "level", "tokens/s", "level GB/s / bytes", "GB/s", "of level", "vs f32"},
              rows);
  plot_levels(r, half, roof, measured);
  r.ran(half);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Point& f32 = measured[i].front();
    const MemoryLevel& level = roof.level_for(f32.step_bytes);
    std::string text = lines[i].name + " (" + lines[i].spec +
                       fmt(", %.0f MB per f32 step, read from ", double(f32.step_bytes) / 1e6) + level.name + "): " +
                       speedups(measured[i]) + fmt("; f32 reaches %.0f%%", 100 * f32.gbps() / level.read_gbps) +
                       " of " + level.name + "'s bandwidth";
    if (!level.main_memory())
      text += fmt(" at %.1f GB/s,", f32.gbps()) +
              fmt(" %.2fx what main memory gives: that is what caches buy", f32.gbps() / roof.main_memory().read_gbps);
    r.conclude(half, text + slower_streams(measured[i]));
  }
}

}  // namespace

void bytes(const Options& o) {
  Report r("bytes", "decode against bytes per weight: GB/s read per step, under the bandwidth of the level the bytes live in");
  auto cpu = cpu_backend(o);
  run_half(r, "cpu", *cpu, o.model, o.quick ? 8 : 64, o.quick);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model, o.quick ? 16 : 128, o.quick);
  }
  r.axes("MB read per decode step", "GB/s read (one sequence)", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
