#include "backend/cpu/exec/session.h"

#include <algorithm>

namespace lr::cpu {

Session::Session(const Weights& w_, const BackendOptions& opt, KvMode kv, bool own_cache,
                 std::shared_ptr<const PanelTable> panels_)
    : w(w_),
      panels(std::move(panels_)),
      c(w_.cfg),
      pool(std::max(1, opt.cpu.n_threads)),
      ctx(opt.ctx),
      rope(w_.cfg, opt.ctx),
      rope_swa(w_.cfg, w_.cfg.swa_layers.empty() ? 0 : opt.ctx, 1),
      rope_none(w_.cfg, w_.cfg.no_rope_layers.empty() ? 0 : opt.ctx, 2) {
  pool.set_spin(opt.exec.spin);
  if (own_cache)
    cache = make_seq_cache(w, opt, kv, /*batched=*/false, std::min(kPrefillRows, opt.ctx));
}

}  // namespace lr::cpu
