#include "tests/naive_llama.h"

#include <cmath>

#include "tests/op_harness.h"

namespace minfer::test {

namespace {

// out (n) = w (n, k) x (k), w a row-major f32 matrix.
void matvec(double* out, const float* w, const double* x, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += double(w[i * k + j]) * x[j];
    out[i] = sum;
  }
}

void rmsnorm(double* out, const double* x, const float* weight, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
  for (int64_t i = 0; i < n; ++i) out[i] = double(weight[i]) * (scale * x[i]);
}

const float* f32(const Tensor& t) { return t.data_as<float>(); }

}  // namespace

NaiveLlama::NaiveLlama(const LlamaHostWeights& weights) : w_(weights) {
  const LlamaConfig& c = w_.config;
  k_cache_.assign(static_cast<size_t>(c.n_layers * c.n_ctx * c.kv_dim()), 0.0);
  v_cache_.assign(k_cache_.size(), 0.0);
}

std::vector<double> NaiveLlama::forward(int32_t token, int64_t pos) {
  const LlamaConfig& c = w_.config;
  const int64_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim(), hs = c.head_dim();
  const int64_t group = c.n_heads / c.n_kv_heads;
  std::vector<double> x(dim), xb(dim), q(dim), att(dim), hb(hidden), hb2(hidden), scores(pos + 1);
  std::vector<double> out(dim), ffn(dim);
  for (int64_t i = 0; i < dim; ++i) x[i] = f32(w_.token_embedding)[token * dim + i];

  for (int64_t l = 0; l < c.n_layers; ++l) {
    rmsnorm(xb.data(), x.data(), f32(w_.rms_att) + l * dim, dim);
    double* k = &k_cache_[(l * c.n_ctx + pos) * kv_dim];
    double* v = &v_cache_[(l * c.n_ctx + pos) * kv_dim];
    matvec(q.data(), f32(w_.wq) + l * dim * dim, xb.data(), dim, dim);
    matvec(k, f32(w_.wk) + l * kv_dim * dim, xb.data(), kv_dim, dim);
    matvec(v, f32(w_.wv) + l * kv_dim * dim, xb.data(), kv_dim, dim);
    // RoPE on interleaved pairs, angle pos / 10000^(2j / head_size), in double.
    for (int64_t i = 0; i < dim; i += 2) {
      const int64_t j = (i % hs) / 2;
      const double angle = double(pos) / std::pow(10000.0, double(2 * j) / double(hs));
      const double cs = std::cos(angle), sn = std::sin(angle);
      for (double* vec : {q.data(), k}) {
        if (vec == k && i >= kv_dim) continue;
        const double v0 = vec[i], v1 = vec[i + 1];
        vec[i] = v0 * cs - v1 * sn;
        vec[i + 1] = v0 * sn + v1 * cs;
      }
    }
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t kv_head = h / group;
      double max_score = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        const double* kt = &k_cache_[(l * c.n_ctx + t) * kv_dim + kv_head * hs];
        double s = 0.0;
        for (int64_t i = 0; i < hs; ++i) s += q[h * hs + i] * kt[i];
        scores[t] = s / std::sqrt(double(hs));
        max_score = std::max(max_score, scores[t]);
      }
      double total = 0.0;
      for (int64_t t = 0; t <= pos; ++t) total += (scores[t] = std::exp(scores[t] - max_score));
      for (int64_t i = 0; i < hs; ++i) {
        double acc = 0.0;
        for (int64_t t = 0; t <= pos; ++t)
          acc += scores[t] / total * v_cache_[(l * c.n_ctx + t) * kv_dim + kv_head * hs + i];
        att[h * hs + i] = acc;
      }
    }
    matvec(out.data(), f32(w_.wo) + l * dim * dim, att.data(), dim, dim);
    for (int64_t i = 0; i < dim; ++i) x[i] += out[i];
    rmsnorm(xb.data(), x.data(), f32(w_.rms_ffn) + l * dim, dim);
    matvec(hb.data(), f32(w_.w1) + l * hidden * dim, xb.data(), hidden, dim);
    matvec(hb2.data(), f32(w_.w3) + l * hidden * dim, xb.data(), hidden, dim);
    for (int64_t i = 0; i < hidden; ++i) hb[i] = hb[i] / (1.0 + std::exp(-hb[i])) * hb2[i];
    matvec(ffn.data(), f32(w_.w2) + l * dim * hidden, hb.data(), dim, hidden);
    for (int64_t i = 0; i < dim; ++i) x[i] += ffn[i];
  }
  rmsnorm(xb.data(), x.data(), f32(w_.rms_final), dim);
  std::vector<double> logits(static_cast<size_t>(c.vocab_size));
  matvec(logits.data(), f32(w_.classifier), xb.data(), c.vocab_size, dim);
  return logits;
}

LlamaHostWeights random_llama_weights(const LlamaConfig& c, uint64_t seed, double gain) {
  c.validate("random_llama_weights");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t L = c.n_layers, d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), V = c.vocab_size;
  auto matrix = [&](std::vector<int64_t> shape, int64_t fan_in) {
    const float bound = static_cast<float>(gain / std::sqrt(double(fan_in)));
    return host_random(shape, rng, -bound, bound);
  };
  LlamaHostWeights w;
  w.config = c;
  w.token_embedding = host_random({V, d}, rng, -1.0f, 1.0f);
  w.rms_att = host_random({L, d}, rng, 0.5f, 1.5f);
  w.rms_ffn = host_random({L, d}, rng, 0.5f, 1.5f);
  w.rms_final = host_random({d}, rng, 0.5f, 1.5f);
  w.wq = matrix({L, d, d}, d);
  w.wk = matrix({L, kv, d}, d);
  w.wv = matrix({L, kv, d}, d);
  w.wo = matrix({L, d, d}, d);
  w.w1 = matrix({L, h, d}, d);
  w.w2 = matrix({L, d, h}, h);
  w.w3 = matrix({L, h, d}, d);
  w.classifier = c.shared_classifier ? w.token_embedding : host_random({V, d}, rng, -1.0f, 1.0f);
  return w;
}

}  // namespace minfer::test
