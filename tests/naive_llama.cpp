#include "tests/naive_llama.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/op_harness.h"

namespace minfer::test {

namespace {

// RoPE frequencies in double, from the config's theta and scaling (Hugging Face's formulas).
std::vector<double> inv_freq(const LlamaConfig& c) {
  const int64_t hs = c.head_dim();
  std::vector<double> f(static_cast<size_t>(hs / 2));
  for (int64_t j = 0; j < hs / 2; ++j) {
    double x = 1.0 / std::pow(c.rope_theta, double(2 * j) / double(hs));
    const RopeScaling& r = c.rope_scaling;
    if (r.type == RopeScaling::Type::linear) x /= r.factor;
    if (r.type == RopeScaling::Type::factors) x /= r.factors[static_cast<size_t>(j)];
    if (r.type == RopeScaling::Type::llama3) {
      const double wavelen = 2.0 * M_PI / x, old = double(r.original_max_positions);
      if (wavelen > old / r.low_freq_factor) {
        x /= r.factor;
      } else if (wavelen >= old / r.high_freq_factor) {
        const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1.0 - smooth) * x / r.factor + smooth * x;
      }
    }
    f[static_cast<size_t>(j)] = x;
  }
  return f;
}

// Rotates the heads of `vec` (n_heads x head_dim) by position `pos`: pairs (2j, 2j + 1), or
// (j, j + head_dim / 2) in Hugging Face's rotate-half layout.
void rotate(double* vec, int64_t n_heads, int64_t hs, int64_t pos, const std::vector<double>& freq, bool rotate_half) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t j = 0; j < hs / 2; ++j) {
      const double angle = double(pos) * freq[static_cast<size_t>(j)];
      const double cs = std::cos(angle), sn = std::sin(angle);
      double* a = vec + h * hs + (rotate_half ? j : 2 * j);
      double* b = vec + h * hs + (rotate_half ? j + hs / 2 : 2 * j + 1);
      const double v0 = *a, v1 = *b;
      *a = v0 * cs - v1 * sn;
      *b = v0 * sn + v1 * cs;
    }
}

// A host tensor as doubles (f32, f16 or bf16).
std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::f32: out[i] = static_cast<const float*>(t.data())[i]; break;
      case DType::f16: out[i] = f16_to_f32(static_cast<const uint16_t*>(t.data())[i]); break;
      case DType::bf16: out[i] = bf16_to_f32(static_cast<const uint16_t*>(t.data())[i]); break;
      default: ADD_FAILURE() << "NaiveLlama reads float weights";
    }
  }
  return out;
}

// out (n) = w (n, k) x (k)
void matvec(double* out, const std::vector<double>& w, const double* x, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += w[static_cast<size_t>(i * k + j)] * x[j];
    out[i] = sum;
  }
}

void rmsnorm(double* out, const double* x, const std::vector<double>& weight, int64_t n, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[static_cast<size_t>(i)] * (scale * x[i]);
}

}  // namespace

NaiveLlama::NaiveLlama(const LlamaHostWeights& weights) : config_(weights.config), rotate_half_(weights.rotate_half) {
  const LlamaConfig& c = config_;
  embedding_ = values(weights.token_embedding);
  classifier_ = values(weights.classifier);
  rms_final_ = values(weights.rms_final);
  for (const auto& l : weights.layers)
    layers_.push_back({values(l.rms_att), values(l.wq), values(l.wk), values(l.wv), values(l.wo), values(l.rms_ffn),
                       values(l.w1), values(l.w2), values(l.w3)});
  inv_freq_ = inv_freq(c);
  k_cache_.assign(static_cast<size_t>(c.n_layers * c.n_ctx * c.kv_dim()), 0.0);
  v_cache_.assign(k_cache_.size(), 0.0);
}

std::vector<double> NaiveLlama::forward(int32_t token, int64_t pos) {
  const LlamaConfig& c = config_;
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hs = c.head_dim();
  const int64_t group = c.n_heads / c.n_kv_heads;
  const double eps = c.rms_eps;
  std::vector<double> x(dim), xb(dim), q(q_dim), att(q_dim), hb(hidden), hb2(hidden), scores(pos + 1);
  std::vector<double> out(dim), ffn(dim);
  for (int64_t i = 0; i < dim; ++i) x[i] = embedding_[static_cast<size_t>(token * dim + i)];

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& w = layers_[static_cast<size_t>(l)];
    rmsnorm(xb.data(), x.data(), w.rms_att, dim, eps);
    double* k = &k_cache_[(l * c.n_ctx + pos) * kv_dim];
    double* v = &v_cache_[(l * c.n_ctx + pos) * kv_dim];
    matvec(q.data(), w.wq, xb.data(), q_dim, dim);
    matvec(k, w.wk, xb.data(), kv_dim, dim);
    matvec(v, w.wv, xb.data(), kv_dim, dim);
    rotate(q.data(), c.n_heads, hs, pos, inv_freq_, rotate_half_);
    rotate(k, c.n_kv_heads, hs, pos, inv_freq_, rotate_half_);
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t kv_head = h / group;
      double max_score = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        const double* kt = &k_cache_[(l * c.n_ctx + t) * kv_dim + kv_head * hs];
        double sc = 0.0;
        for (int64_t i = 0; i < hs; ++i) sc += q[h * hs + i] * kt[i];
        scores[t] = sc / std::sqrt(double(hs));
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
    matvec(out.data(), w.wo, att.data(), dim, q_dim);
    for (int64_t i = 0; i < dim; ++i) x[i] += out[i];
    rmsnorm(xb.data(), x.data(), w.rms_ffn, dim, eps);
    matvec(hb.data(), w.w1, xb.data(), hidden, dim);
    matvec(hb2.data(), w.w3, xb.data(), hidden, dim);
    for (int64_t i = 0; i < hidden; ++i) hb[i] = hb[i] / (1.0 + std::exp(-hb[i])) * hb2[i];
    matvec(ffn.data(), w.w2, hb.data(), dim, hidden);
    for (int64_t i = 0; i < dim; ++i) x[i] += ffn[i];
  }
  rmsnorm(xb.data(), x.data(), rms_final_, dim, eps);
  std::vector<double> logits(static_cast<size_t>(c.vocab_size));
  matvec(logits.data(), classifier_, xb.data(), c.vocab_size, dim);
  return logits;
}

LlamaHostWeights random_llama_weights(const LlamaConfig& c, uint64_t seed, double gain) {
  c.validate("random_llama_weights");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  auto matrix = [&](std::vector<int64_t> shape, int64_t fan_in) {
    const float bound = static_cast<float>(gain / std::sqrt(double(fan_in)));
    return host_random(shape, rng, -bound, bound);
  };
  LlamaHostWeights w;
  w.config = c;
  w.token_embedding = host_random({V, d}, rng, -1.0f, 1.0f);
  w.rms_final = host_random({d}, rng, 0.5f, 1.5f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LlamaHostWeights::Layer layer;
    layer.rms_att = host_random({d}, rng, 0.5f, 1.5f);
    layer.rms_ffn = host_random({d}, rng, 0.5f, 1.5f);
    layer.wq = matrix({q, d}, d);
    layer.wk = matrix({kv, d}, d);
    layer.wv = matrix({kv, d}, d);
    layer.wo = matrix({d, q}, q);
    layer.w1 = matrix({h, d}, d);
    layer.w2 = matrix({d, h}, h);
    layer.w3 = matrix({h, d}, d);
    w.layers.push_back(layer);
  }
  w.classifier = c.shared_classifier ? w.token_embedding : host_random({V, d}, rng, -1.0f, 1.0f);
  return w;
}

}  // namespace minfer::test
