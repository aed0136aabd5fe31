// Rank allocation under a global budget: which rank each matrix gets when the
// compressed matrices together may cost at most a budget (bytes, or
// parameters), instead of every matrix keeping the same fraction.
//
// Each matrix i has whitened singular values sigma_i (descending; dropping
// component j costs sigma_ij^2 of activation error, ||W S||_F^2 = E_i in
// all). Its loss at rank r is normalised by its own energy,
// L_i(r) = sum_{j >= r} sigma_ij^2 / E_i (the squared relative error of the
// layer's output over the calibration inputs), so layers of different scale
// compare (or, with `relative` off, the absolute activation error: layers
// whose outputs are larger weigh more). The allocation minimises sum_i L_i subject to the budget: a
// unit of g components (g = the rank granularity) is dropped where it costs the least normalised
// loss per byte saved. A matrix is left dense when its factors would not be smaller than its dense
// form.
//
// A correction (the residual form's U V on top of a quantized W) has no dense
// state: at rank 0 it costs nothing and leaves its whole loss, and its loss
// is normalised by the energy of W's output (||W S||_F^2, passed in), not of
// the error it corrects, so corrections of different matrices compare by
// how much of each layer's output they restore.
#pragma once

#include <cstdint>
#include <vector>

namespace lr::compress {

struct RankCandidate {
  std::vector<double> sigma;  // whitened singular values, descending (all of them)
  double dense_cost = 0;      // cost of the matrix left dense
  double rank_cost = 0;       // cost of one rank of factors (a row of V plus a column of U)
  int64_t granularity = 1;    // ranks are multiples of this (quantized factors: 32)
  bool relative = true;       // loss normalised by the matrix's energy (else sum of sigma^2 as is)
  bool correction = false;    // rank 0 = no correction (cost 0, whole loss), not a dense matrix
  double energy = 0;          // the normaliser when relative; 0 = sum of sigma^2
  int64_t max_rank = 0;       // the most it may take (factors computed up to it); 0 = no limit
};

struct Allocation {
  std::vector<int64_t> ranks;  // per candidate; 0 = left dense
  double cost = 0;             // total cost of the choice
  double loss = 0;             // sum of the normalised losses (a correction at rank 0: its whole loss)
};

// Ranks for `cands` with total cost <= budget (in the candidates' cost unit).
// The result is tight: no single further unit of any matrix (nor turning a
// matrix at its largest useful rank dense) fits in what is left.
// lr::Error when the budget is below what every matrix at its smallest rank
// (one unit; a correction: none) costs, or a candidate is malformed (no sigma, non-positive
// costs, granularity < 1).
Allocation allocate_ranks(const std::vector<RankCandidate>& cands, double budget);

// The largest rank a candidate may take: the largest multiple of its
// granularity, at most sigma.size() (and max_rank when set), whose factors
// cost less than the dense matrix (0 when even one unit does not).
int64_t useful_rank(const RankCandidate& c);

}  // namespace lr::compress
