// gem inspect: loads and validates a GGUF, then prints its profile, the layer plan, the tensors by
// storage type and the weight and KV-cache memory; exits non-zero with the reason when rejected.
// An MTP assistant (gemma4-assistant) is described as such: its layers, widths and the target
// layers it reads; with --target, whether it pairs with that target.
#include <cstdio>
#include <map>
#include <memory>

#include "backend/cpu/isa.h"
#include "cli/backend_flags.h"
#include "cli/command.h"
#include "model/assistant.h"
#include "model/model.h"

namespace gem::cli {
namespace {

struct InspectArgs {
  std::string path;
  int n_ctx = 4096;
  int n_seq = 1;
  std::string kv_type = kDefaultKvType;
  std::string target;  // --target: the target model an assistant is checked against
};

std::string bytes_str(uint64_t b) {
  return strprintf("%llu B (%.2f GiB)", static_cast<unsigned long long>(b), b / 1073741824.0);
}

// Tensors grouped by storage type, and the total.
void print_tensor_groups(const gguf::GgufFile& f) {
  struct Group {
    int count = 0;
    uint64_t bytes = 0;
    uint64_t elems = 0;
  };
  std::map<std::string, Group> groups;
  uint64_t weight_bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    Group& g = groups[std::string(dtype_name(t.type))];
    ++g.count;
    g.bytes += t.n_bytes;
    g.elems += t.n_elements;
    weight_bytes += t.n_bytes;
  }
  std::printf("\ntensors: %zu\n", f.tensors().size());
  for (const auto& [type, g] : groups) {
    std::printf("  %-5s %5d tensors  %14llu parameters  %s\n", type.c_str(), g.count,
                static_cast<unsigned long long>(g.elems), bytes_str(g.bytes).c_str());
  }
  std::printf("weights: %s\n", bytes_str(weight_bytes).c_str());
}

int run_inspect_assistant(const InspectArgs& a) {
  auto loaded = model::load_assistant(a.path);
  if (!loaded.ok()) return fail("inspect", "rejected: " + loaded.message());
  const model::Assistant& m = **loaded;
  const model::AssistantConfig& c = m.config;
  const gguf::GgufFile& f = *m.file;
  std::string name = "?";
  if (auto n = f.get_string("general.name"); n.ok()) name = std::string(*n);
  std::printf("%s: Gemma 4 MTP assistant (gemma4-assistant, a drafter for speculative decoding), profile %s "
              "(\"%s\"), GGUF v%u, %llu bytes\n", a.path.c_str(), std::string(model::profile_name(c.profile)).c_str(),
              name.c_str(), f.version(),
              static_cast<unsigned long long>(f.file_size()));
  int n_full = 0;
  for (bool s : c.sliding) n_full += s ? 0 : 1;
  std::printf("  layers %d (%d sliding, %d full), n_embd %d, n_ff %d, heads %d, vocab %d\n", c.n_layers,
              c.n_layers - n_full, n_full, c.n_embd, c.n_ff, c.n_heads, c.n_vocab);
  std::printf("  target width %d (embedding_length_out): pre-projection %d -> %d from concat(target "
              "embedding, h), post-projection %d -> %d (h_next)\n", c.n_embd_out, 2 * c.n_embd_out, c.n_embd,
              c.n_embd, c.n_embd_out);
  std::printf("  sliding: %d KV heads x %d, window %d, rope theta %g; full: %d KV heads x %d, rope theta %g\n",
              c.n_kv_heads_sliding, c.head_dim_sliding, c.sliding_window, c.rope_theta_sliding,
              c.n_kv_heads_full, c.head_dim_full, c.rope_theta_full);
  std::printf("  owns no KV cache: its sliding layers read the target's layer N-2, its full layer the "
              "target's layer N-1 (N = the target's layer count); logits without soft-cap\n");

  std::printf("\nlayer plan\n");
  std::printf("  %5s  %-7s  %5s  %8s  %8s  %6s  %10s  %s\n", "layer", "kind", "heads", "kv_heads", "head_dim",
              "window", "rope_theta", "reads target layer");
  for (const model::LayerPlan& p : m.plan) {
    const bool sliding = p.kind == model::AttnKind::kSliding;
    std::printf("  %5d  %-7s  %5d  %8d  %8d  %6s  %10g  %s\n", p.layer, sliding ? "sliding" : "full", p.n_heads,
                p.n_kv_heads, p.head_dim, sliding ? std::to_string(p.window).c_str() : "-", p.rope_theta,
                sliding ? "N-2" : "N-1");
  }
  print_tensor_groups(f);

  if (a.target.empty()) return 0;
  auto target = model::load_model(a.target);
  if (!target.ok()) return fail("inspect", "--target: rejected: " + target.message());
  const model::Model& t = **target;
  if (Status st = model::check_pairing(m, t); !st.ok()) {
    std::printf("\npairing with %s: refused\n", a.target.c_str());
    return fail("inspect", "pairing refused: " + st.message());
  }
  const int n = t.config.n_layers;
  std::printf("\npairing with %s: ok (target of %d layers, width %d): the sliding layers read target layer "
              "%d, the full layer target layer %d\n", a.target.c_str(), n, t.config.n_embd,
              model::assistant_target_layer(true, n), model::assistant_target_layer(false, n));
  return 0;
}

int run_inspect(const InspectArgs& a) {
  auto kv = model::parse_kv_type(a.kv_type);
  if (!kv.ok()) return fail("inspect", kv.message());
  if (a.n_ctx < 1) return fail("inspect", strprintf("-c %d: the context must be at least 1", a.n_ctx));
  if (a.n_seq < 1) {
    return fail("inspect", strprintf("--parallel %d: the sequence slots must be at least 1", a.n_seq));
  }
  {
    auto file = gguf::GgufFile::open(a.path);
    if (!file.ok()) return fail("inspect", "rejected: " + file.message());
    if (model::is_assistant_file(**file)) return run_inspect_assistant(a);
  }
  if (!a.target.empty()) {
    return fail("inspect", "--target " + a.target + ": only an MTP assistant file (gemma4-assistant) is "
                "checked against a target; " + a.path + " is not one");
  }
  auto loaded = model::load_model(a.path);
  if (!loaded.ok()) return fail("inspect", "rejected: " + loaded.message());
  const model::Model& m = **loaded;
  const model::Config& c = m.config;
  const gguf::GgufFile& f = *m.file;

  std::string name = "?";
  if (auto n = f.get_string("general.name"); n.ok()) name = std::string(*n);
  std::printf("%s: Gemma 4 dense, profile %s (\"%s\"), GGUF v%u, %llu bytes\n", a.path.c_str(),
              std::string(model::profile_name(c.profile)).c_str(), name.c_str(), f.version(),
              static_cast<unsigned long long>(f.file_size()));
  int n_full = 0;
  for (bool s : c.sliding) n_full += s ? 0 : 1;
  std::printf("  layers %d (%d sliding, %d full), n_embd %d, n_ff %d, heads %d, vocab %d\n", c.n_layers,
              c.n_layers - n_full, n_full, c.n_embd, c.n_ff, c.n_heads, c.n_vocab);
  std::printf("  sliding: %d KV heads x %d, window %d, rope theta %g; full: %d KV heads x %d, rope theta %g\n",
              c.n_kv_heads_sliding, c.head_dim_sliding, c.sliding_window, c.rope_theta_sliding,
              c.n_kv_heads_full, c.head_dim_full, c.rope_theta_full);
  std::printf("  context_length %d, rms eps %g, final logit softcap %g\n", c.context_length, c.rms_eps,
              c.final_logit_softcap);
  if (c.sampling_temp || c.sampling_top_k || c.sampling_top_p || c.sampling_min_p) {
    std::printf("  recommended sampling:%s%s%s%s\n",
                c.sampling_temp ? strprintf(" temp %g", *c.sampling_temp).c_str() : "",
                c.sampling_top_k ? strprintf(" top_k %d", *c.sampling_top_k).c_str() : "",
                c.sampling_top_p ? strprintf(" top_p %g", *c.sampling_top_p).c_str() : "",
                c.sampling_min_p ? strprintf(" min_p %g", *c.sampling_min_p).c_str() : "");
  }

  std::printf("\nlayer plan\n");
  std::printf("  %5s  %-7s  %5s  %8s  %8s  %6s  %10s  %5s  %11s  %8s  %7s\n", "layer", "kind", "heads",
              "kv_heads", "head_dim", "window", "rope_theta", "n_rot", "rot_pairs", "v_from_k", "kv_slot");
  for (const model::LayerPlan& p : m.plan) {
    const bool sliding = p.kind == model::AttnKind::kSliding;
    std::printf("  %5d  %-7s  %5d  %8d  %8d  %6s  %10g  %5d  %4d of %3d  %8s  %7d\n", p.layer,
                sliding ? "sliding" : "full", p.n_heads, p.n_kv_heads, p.head_dim,
                sliding ? std::to_string(p.window).c_str() : "-", p.rope_theta, p.n_rot,
                p.n_rot_pairs_active, p.n_rot / 2, p.v_from_k ? "yes" : "no", p.kv_slot);
  }

  print_tensor_groups(f);
  std::printf("cpu kernels: %s\n", cpu::isa_description().c_str());

  std::printf("\nKV cache (%s; sliding layers hold a ring of %d slots, the window and %d spare):\n",
              a.kv_type.c_str(), model::kv_ring_slots(c.sliding_window), model::kRingSpare);
  std::printf("  at -c %d: %s\n", a.n_ctx, bytes_str(model::kv_cache_bytes(m.plan, a.n_ctx, *kv)).c_str());
  if (a.n_seq > 1) {
    std::printf("  at -c %d --parallel %d (one cache per sequence slot): %s\n", a.n_ctx, a.n_seq,
                bytes_str(model::kv_cache_bytes(m.plan, a.n_ctx, *kv, a.n_seq)).c_str());
  }
  std::printf("  at the training context %d: %s\n", c.context_length,
              bytes_str(model::kv_cache_bytes(m.plan, c.context_length, *kv)).c_str());
  return 0;
}

RunFn setup_inspect(CLI::App& sub) {
  auto a = std::make_shared<InspectArgs>();
  sub.add_option("file", a->path, "GGUF model file")->required();
  sub.add_option("-c,--ctx-size", a->n_ctx, "context for the KV-cache figure (default 4096)");
  sub.add_option("--parallel", a->n_seq, "sequence slots for the KV-cache figure (default 1)");
  sub.add_option("--target", a->target,
                 "for an MTP assistant file: the target model to check the pairing against");
  sub.add_option("--kv-type", a->kv_type, "KV storage: f32, f16 (default) or f16-full")
      ->check(CLI::IsMember({"f32", "f16", "f16-full"}));
  return [a] { return run_inspect(*a); };
}

GEM_COMMAND(inspect, "Validate a GGUF and print its profile, layer plan, tensors and memory", setup_inspect);

}  // namespace
}  // namespace gem::cli
