// Weights on the device (backend/cuda/device_weights.h).
#include "backend/cuda/device_weights.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace lr::cuda {

namespace {

std::shared_ptr<const DeviceWeights> upload(std::shared_ptr<const Weights> host) {
  auto d = std::make_shared<DeviceWeights>();
  const Weights& W = *host;
  d->host = host;
  d->layout = plan_weights(W);
  d->w = device_alloc<__nv_bfloat16>(d->layout.elements);
  std::vector<uint16_t> stage;
  std::vector<float> row;
  for (const WeightLayout::Range& r : d->layout.ranges) {
    const int64_t rows = r.rows(), ld = padded_cols(r.cols);
    const size_t eb = r.dtype == DType::F32 ? 4 : 2;
    stage.assign(size_t(rows) * size_t(ld), 0);
    row.resize(size_t(r.cols));
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* src = r.begin + uint64_t(i) * uint64_t(r.cols) * eb;
      uint16_t* dst = &stage[size_t(i) * size_t(ld)];
      if (r.dtype == DType::BF16) {
        std::memcpy(dst, src, size_t(r.cols) * 2);
      } else {
        dequantize(r.dtype, src, row.data(), r.cols);
        for (int64_t j = 0; j < r.cols; ++j) dst[j] = f32_to_bf16(row[size_t(j)]);
      }
    }
    CK(cudaMemcpy(d->w + r.offset, stage.data(), stage.size() * 2, cudaMemcpyHostToDevice));
  }
  std::vector<const Matrix*> vectors = {&W.out_norm};
  for (const Layer& L : W.layers)  // (a model has some of them: cfg.pre_norms, qk_norm, post_norms)
    for (const Matrix* n :
         {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm, &L.attn_post_norm, &L.ffn_post_norm})
      if (n->rows) vectors.push_back(n);
  for_each_linear(W, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.b.rows) vectors.push_back(&lin.b);
  });
  size_t total = 0;
  for (const Matrix* v : vectors) {
    LR_ASSERT(v->rows == 1 && v->dtype == DType::F32);
    total += size_t(v->cols);
  }
  d->vectors = device_alloc<float>(total);
  float* dst = d->vectors;
  for (const Matrix* v : vectors) {
    CK(cudaMemcpy(dst, v->f32(), size_t(v->cols) * 4, cudaMemcpyHostToDevice));
    d->vector_at[v->ptr()] = dst;
    dst += v->cols;
  }
  std::vector<const Pivots*> pivoted;
  size_t sources = 0;
  for_each_linear(W, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.pivoted()) pivoted.push_back(lin.pivots.get()), sources += lin.pivots->source.size();
  });
  if (sources) {
    d->sources = device_alloc<int32_t>(sources);
    int32_t* to = d->sources;
    for (const Pivots* p : pivoted) {
      CK(cudaMemcpy(to, p->source.data(), p->source.size() * 4, cudaMemcpyHostToDevice));
      d->source_at[p] = to;
      to += p->source.size();
    }
  }
  // The copies above ran on the legacy default stream, which sessions' non-blocking streams do not
  // wait for.
  CK(cudaDeviceSynchronize());
  return d;
}

}  // namespace

std::shared_ptr<const DeviceWeights> device_weights(const std::shared_ptr<const Weights>& w) {
  static std::mutex mu;
  static std::map<const Weights*, std::shared_ptr<const DeviceWeights>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end();)
    it = it->second->host.expired() ? cache.erase(it) : std::next(it);
  auto& d = cache[w.get()];
  if (!d) d = upload(w);
  return d;
}

}  // namespace lr::cuda
