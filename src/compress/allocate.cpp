#include "compress/allocate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lr::compress {

namespace {

// One candidate's curve: the normalised gain of each unit it may keep.
struct Curve {
  std::vector<double> gain;  // [units]: sum of sigma^2 / E over the unit's components
  double total = 0;          // sum of every sigma^2 / E (the loss at rank 0)
  double unit_cost = 0;      // granularity * rank_cost
  double dense_cost = 0;     // cost of the rank-0 state: the dense matrix, or no correction (0)
  double dense_loss = 0;     // loss of the rank-0 state: 0 dense, `total` with no correction
  bool correction = false;
  double loss(int64_t k) const {  // loss with the first k units kept
    double kept = 0;
    for (int64_t u = 0; u < k; ++u) kept += gain[size_t(u)];
    return std::max(0.0, total - kept);
  }
};

// A candidate's state: rank 0 (dense, or no correction), or its first k >= 1 units.
struct State {
  bool dense = false;
  int64_t k = 0;
};

double cost_of(const Curve& c, const State& s) {
  return s.dense ? c.dense_cost : double(s.k) * c.unit_cost;
}
double loss_of(const Curve& c, const State& s) { return s.dense ? c.dense_loss : c.loss(s.k); }

// The state minimising loss + mu * cost.
State best_for(const Curve& c, double mu) {
  const int64_t units = int64_t(c.gain.size());
  if (units == 0) return {true, 0};
  int64_t k = 1;
  while (k < units && c.gain[size_t(k)] > mu * c.unit_cost) ++k;
  if (c.dense_loss + mu * c.dense_cost < c.loss(k) + mu * double(k) * c.unit_cost) return {true, 0};
  return {false, k};
}

}  // namespace

int64_t useful_rank(const RankCandidate& c) {
  const int64_t g = c.granularity;
  int64_t r = int64_t(c.sigma.size());
  if (c.max_rank > 0) r = std::min(r, c.max_rank);
  r = r / g * g;
  while (r > 0 && double(r) * c.rank_cost >= c.dense_cost) r -= g;
  return r;
}

Allocation allocate_ranks(const std::vector<RankCandidate>& cands, double budget) {
  std::vector<Curve> curves;
  double floor_cost = 0;  // every matrix at its cheapest state
  for (size_t i = 0; i < cands.size(); ++i) {
    const RankCandidate& rc = cands[i];
    if (rc.sigma.empty() || !(rc.dense_cost > 0) || !(rc.rank_cost > 0) || rc.granularity < 1)
      fail(
          "rank allocation: matrix {} is malformed ({} singular values, dense cost {}, rank cost "
          "{}, granularity {})",
          i, rc.sigma.size(), rc.dense_cost, rc.rank_cost, rc.granularity);
    Curve c;
    double energy = rc.energy;
    if (!(energy > 0)) {
      energy = 0;
      for (double s : rc.sigma) energy += s * s;
    }
    if (!(energy > 0) || !rc.relative) energy = 1;
    for (double s : rc.sigma) c.total += s * s / energy;
    const int64_t units = useful_rank(rc) / rc.granularity;
    for (int64_t u = 0; u < units; ++u) {
      double g = 0;
      for (int64_t j = u * rc.granularity; j < (u + 1) * rc.granularity; ++j)
        g += rc.sigma[size_t(j)] * rc.sigma[size_t(j)] / energy;
      c.gain.push_back(g);
    }
    c.unit_cost = double(rc.granularity) * rc.rank_cost;
    c.correction = rc.correction;
    c.dense_cost = rc.correction ? 0.0 : rc.dense_cost;
    c.dense_loss = rc.correction ? c.total : 0.0;
    floor_cost += rc.correction ? 0.0 : units > 0 ? c.unit_cost : c.dense_cost;
    curves.push_back(std::move(c));
  }
  if (floor_cost > budget)
    fail("the budget ({:.0f}) is below what the smallest ranks cost ({:.0f}): raise --budget",
         budget, floor_cost);

  // The Lagrangian relaxation: the smallest multiplier whose choice fits.
  auto choose = [&](double mu, std::vector<State>& st) {
    double total = 0;
    for (size_t i = 0; i < curves.size(); ++i) {
      st[i] = best_for(curves[i], mu);
      total += cost_of(curves[i], st[i]);
    }
    return total;
  };
  std::vector<State> st(curves.size()), trial(curves.size());
  if (choose(0.0, st) > budget) {
    double lo = 1e-30, hi = 1.0;
    while (choose(hi, trial) > budget) hi *= 16;
    for (int it = 0; it < 200 && hi / lo > 1 + 1e-12; ++it) {
      const double mid = std::sqrt(lo * hi);
      if (choose(mid, trial) > budget)
        lo = mid;
      else
        hi = mid;
    }
    choose(hi, st);
  }

  // Fill what is left: the move with the most loss saved per cost that fits.
  double cost = 0;
  for (size_t i = 0; i < curves.size(); ++i) cost += cost_of(curves[i], st[i]);
  for (;;) {
    double best_ratio = -1;
    size_t best = curves.size();
    State best_state;
    for (size_t i = 0; i < curves.size(); ++i) {
      const Curve& c = curves[i];
      if (st[i].dense && !c.correction) continue;  // a dense matrix loses nothing
      const double here = cost_of(c, st[i]);
      State moves[2] = {{false, st[i].dense ? 1 : st[i].k + 1}, {true, 0}};
      for (const State& mv : moves) {
        if (!mv.dense && mv.k > int64_t(c.gain.size())) continue;
        const double extra = cost_of(c, mv) - here;
        if (extra <= 0 || cost + extra > budget) continue;
        const double saved = loss_of(c, st[i]) - loss_of(c, mv);
        if (saved / extra > best_ratio) best_ratio = saved / extra, best = i, best_state = mv;
      }
    }
    if (best == curves.size()) break;
    cost += cost_of(curves[best], best_state) - cost_of(curves[best], st[best]);
    st[best] = best_state;
  }

  Allocation a;
  for (size_t i = 0; i < curves.size(); ++i) {
    a.ranks.push_back(st[i].dense ? 0 : st[i].k * cands[i].granularity);
    a.cost += cost_of(curves[i], st[i]);
    a.loss += loss_of(curves[i], st[i]);
  }
  return a;
}

}  // namespace lr::compress
