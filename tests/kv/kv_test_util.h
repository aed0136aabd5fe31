// Synthetic keys for the key-cache tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"
#include "kv/key_config.h"

namespace lr::kv::test {

// A key cache of type t with the default settings; SVDq at a rank and block length.
inline KeyCacheConfig of(KeyType t) {
  KeyCacheConfig c;
  c.type = t;
  return c;
}
inline KeyCacheConfig svdq_cfg(int rank = 0, int group = 32) {
  KeyCacheConfig c = of(KeyType::Svdq);
  c.svdq.rank = rank;
  c.svdq.group_size = group;
  return c;
}

// Keys [n, d] = mean + sum_j a_tj sigma_j u_j over `rank` random orthonormal
// directions u_j, a ~ N(0, 1), sigma_j = exp(-decay j), plus N(0, noise).
inline std::vector<float> lowrank_keys(int n, int d, int rank, double decay, double noise,
                                       uint32_t seed, float mean = 0.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> N(0, 1);
  // Gram-Schmidt on random vectors.
  std::vector<std::vector<double>> u;
  while (int(u.size()) < rank) {
    std::vector<double> v(static_cast<size_t>(d));
    for (double& x : v) x = N(rng);
    for (const auto& w : u) {
      double p = 0;
      for (int i = 0; i < d; ++i) p += v[size_t(i)] * w[size_t(i)];
      for (int i = 0; i < d; ++i) v[size_t(i)] -= p * w[size_t(i)];
    }
    double nn = 0;
    for (double x : v) nn += x * x;
    for (double& x : v) x /= std::sqrt(nn);
    u.push_back(v);
  }
  std::vector<float> k(size_t(n) * size_t(d));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) k[size_t(t) * size_t(d) + size_t(i)] = mean;
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < rank; ++j) {
      const double a = N(rng) * std::exp(-decay * j) * 4.0;
      for (int i = 0; i < d; ++i) k[size_t(t) * size_t(d) + size_t(i)] += float(a * u[size_t(j)][size_t(i)]);
    }
  for (float& x : k) x += float(noise * N(rng));
  return k;
}

inline std::vector<float> normal(size_t n, uint32_t seed, double sd = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> N(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = float(N(rng));
  return v;
}

// n f16 values ~ N(0, 1) (a value cache).
inline std::vector<uint16_t> f16_normal(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  const std::vector<float> f = normal(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = f32_to_f16(f[i]);
  return v;
}

inline double mse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s / double(a.size());
}

}  // namespace lr::kv::test
