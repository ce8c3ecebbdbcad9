// The tuning record's environment overrides (the only place the CUDA backend reads the
// environment) and its printout.
#include "backend/cuda/tuning.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "base/status.h"

namespace gem::cuda {
namespace {

// `name`'s value as one of `allowed`, or `fallback` (said on stderr when the value is not one).
int pick(const std::function<const char*(const char*)>& get, const char* name, int fallback,
         std::initializer_list<int> allowed) {
  const char* e = get(name);
  if (e == nullptr || e[0] == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (*end == '\0') {
    for (int a : allowed) {
      if (v == a) return a;
    }
  }
  std::string list;
  for (int a : allowed) list += (list.empty() ? "" : ", ") + std::to_string(a);
  std::fprintf(stderr, "gem: %s=\"%s\" is not one of %s; using %d\n", name, e, list.c_str(),
               fallback);
  return fallback;
}

const char* pdl_name(PdlMode m) {
  switch (m) {
    case PdlMode::kOff: return "0";
    case PdlMode::kPrefill: return "prefill";
    default: return "1";
  }
}

}  // namespace

CudaTuning tuning_from_env(const std::function<const char*(const char*)>& getter) {
  const std::function<const char*(const char*)> get =
      getter ? getter : [](const char* n) -> const char* { return std::getenv(n); };
  CudaTuning t;
  if (const char* e = get("GEM_CUDA_PDL"); e != nullptr && e[0] != '\0') {
    if (std::strcmp(e, "0") == 0) {
      t.pdl = PdlMode::kOff;
    } else if (std::strcmp(e, "prefill") == 0) {
      t.pdl = PdlMode::kPrefill;
    } else if (std::strcmp(e, "1") != 0) {
      std::fprintf(stderr, "gem: GEM_CUDA_PDL=\"%s\" is not 0, 1 or prefill; using 1\n", e);
    }
  }
  t.res_cluster = pick(get, "GEM_CUDA_RES_CLUSTER", t.res_cluster, {1, 2, 4, 8});
  t.splits_per_sm = pick(get, "GEM_CUDA_SPLITS_PER_SM", t.splits_per_sm, {1, 2, 3, 4, 5, 6, 7, 8});
  t.attn_split_shape = pick(get, "GEM_CUDA_ATTN_SPLIT_SHAPE", t.attn_split_shape, {0, 1, 2, 3});
  return t;
}

std::string describe(const CudaTuning& t) {
  std::string s;
  auto line = [&](const char* name, long v) { s += strprintf("%s = %ld\n", name, v); };
  s += strprintf("pdl = %s\n", pdl_name(t.pdl));
  line("mv_evict_first", t.mv_evict_first);
  line("mv_preload", t.mv_preload);
  line("res_cluster", t.res_cluster);
  line("attn_form", t.attn_form);
  line("attn_split_min_keys", t.attn_split_min_keys);
  line("attn_split_shape", t.attn_split_shape);
  line("attn_early_kv", t.attn_early_kv);
  line("splits_per_sm", t.splits_per_sm);
  line("merge_chunk", t.merge_chunk);
  line("decode_buckets", t.decode_buckets);
  line("decode_bucket_min", t.decode_bucket_min);
  line("fail_checkpoint_alloc", t.fail_checkpoint_alloc);
  return s;
}

}  // namespace gem::cuda
