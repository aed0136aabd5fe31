// Pieces of a factorization the compressor assembles: leading rows and
// columns of a decomposition, a matrix as f32, the residual form's
// quantization and its error, and the truncation loss of a rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compress/gram.h"
#include "model/weights.h"

namespace lr::compress {

// The first r rows of f ([r, cols]) / the first r columns of f ([rows, r]).
Matrix leading_rows(const MatF& f, int64_t r);
Matrix leading_cols(const MatF& f, int64_t r);

// W as f32 values: the matrix's own when it is F32, else decoded into buf.
const float* as_f32(const Matrix& w, std::vector<float>& buf);

// sum_{j >= r} sigma_j^2 / energy (energy 0: sum_j sigma_j^2).
double truncation_loss(const std::vector<double>& sigma, int64_t r, double energy = 0);

// W [rows, cols] quantized row by row to `type` (or the type llama.cpp
// substitutes when its blocks do not fit a row; `note` says so), weighted by
// `importance` [cols] when it is not empty, on `threads` threads.
Matrix quantize_matrix(DType type, const float* W, int64_t rows, int64_t cols,
                       const std::vector<float>& importance, int threads, std::string& note);

// W - Q(W) into buf (which may hold W itself): what the correction fits.
const float* quantization_error(const Matrix& q, const float* W, std::vector<float>& buf);

// A[m, n] -= out[m, r] in[r, n].
void subtract_product(const MatF& out, const MatF& in, float* A);

}  // namespace lr::compress
