// What each output of a compress run is: its options (checked together),
// the rank it gives a matrix, the costs a global budget weighs, and the
// lowrank.* metadata its file records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compress/allocate.h"
#include "compress/compress_model.h"
#include "model/save.h"

namespace lr::compress {

// Each job's options: the shared ones with its keep, factor type and
// storage. Throws lr::Error for a keep outside (0, 1] or options that do not
// combine, naming them.
std::vector<CompressOptions> job_options(const std::vector<CompressJob>& jobs,
                                         const CompressOptions& opt);

// Whether factors of type t are quantized (Q8_0 and the block formats).
bool quantized_factors(DType t);

// Rank r as job `opt` writes it: with quantized factors rounded down to a
// multiple of 32 (whole Q8_0 rows), unless --rank set it for this kind.
int64_t factor_rank(const CompressOptions& opt, const std::string& kind, int64_t r);

// The rank job `opt` gives an [m, n] matrix of `kind`: --rank's, else by
// keep (0: left dense). Throws lr::Error for a --rank outside [1, min(m, n)].
int64_t rank_of(const CompressOptions& opt, const std::string& kind, int64_t m, int64_t n);

// The costs a global budget weighs for dense matrix w (sigma filled later
// with zeros of its length, so useful_rank can be asked first): parameters,
// or bytes as written (the source's bytes dense; a row of V and a column of
// U in the factor type; a quantized U column counted at Q8_0's 34/32 bytes
// per value, what a rank that is not a multiple of 256 is written in).
RankCandidate rank_candidate(const CompressOptions& opt, const Matrix& w, int64_t granularity);

// The lowrank.* metadata a compressed file records about how it was made.
SaveOptions save_options(const CompressOptions& opt, bool calibrated);

}  // namespace lr::compress
