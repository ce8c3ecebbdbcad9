// gem profile: where the time of a decode step (one row) and of a prompt tile (many rows) goes,
// stage by stage and per layer kind, with the bytes each stage moves and the bandwidth that
// makes; the plain step timed as gem bench times it beside the sum of the stages. A table or
// JSON; --attention-sweep times only attention over a list of depths.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "backend/profile.h"
#include "base/status.h"
#include "cli/backend_flags.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "model/model.h"
#include "runtime/stage_profile.h"

namespace gem::cli {
namespace {

struct ProfileArgs {
  std::string model;
  int depth = 0;
  int n_samples = 10;
  std::string rows = "1";
  std::string parallel;  // batched decode steps: B sequences, one row each
  std::string verify;    // verifications: N rows of one sequence, every row's logits
  std::string sweep;
  bool json = false;
  std::string json_file;
  bool no_sample = false;
  std::string timing = "auto";
  int tile = 0;  // 0: max(512, the largest --rows)
  BackendFlags backend;
};

double us(double seconds) { return seconds * 1e6; }
double mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }
double gbps(uint64_t bytes, double seconds) {
  return seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}
double pct(double part, double whole) { return whole > 0.0 ? 100.0 * part / whole : 0.0; }

std::string pass_title(const runtime::PassProfile& p) {
  if (p.shape == runtime::PassShape::kBatch) {
    return strprintf("batched decode step: %d sequences, one row each at depth %d", p.rows,
                     p.depth);
  }
  if (p.shape == runtime::PassShape::kVerify) {
    return strprintf("verification: %d rows of one sequence at depths %d..%d, every row's logits",
                     p.rows, p.depth, p.depth + p.rows - 1);
  }
  return p.rows == 1 ? strprintf("decode step: 1 row at depth %d", p.depth)
                     : strprintf("prompt tile: %d rows at depth %d", p.rows, p.depth);
}

nlohmann::json stage_json(const runtime::StageRow& r, double whole) {
  return {{"stage", std::string(stage_name(r.stage))},
          {"kind", std::string(runtime::scope_name(r.scope))},
          {"layers", r.n_layers},
          {"mean_us", us(r.mean_s)},
          {"min_us", us(r.min_s)},
          {"weight_bytes", r.bytes.weights},
          {"kv_bytes", r.bytes.kv},
          {"act_bytes", r.bytes.activations},
          {"bytes", r.bytes.total()},
          {"gbps", gbps(r.bytes.total(), r.mean_s)},
          {"share_pct", pct(r.mean_s, whole)}};
}

nlohmann::json pass_json(const runtime::PassProfile& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const runtime::StageRow& r : p.stages) stages.push_back(stage_json(r, p.stages_mean_s));
  return {{"rows", p.rows},
          {"shape", std::string(runtime::shape_name(p.shape))},
          {"batch", p.shape == runtime::PassShape::kBatch},
          {"depth", p.depth},
          {"samples", p.n_samples},
          {"stages", stages},
          {"totals",
           {{"stages_us", us(p.stages_mean_s)},
            {"forward_us", us(p.forward_mean_s)},
            {"forward_min_us", us(p.forward_min_s)},
            {"sample_us", us(p.stages_mean_s - p.forward_mean_s)},
            {"profiled_eval_us", us(p.profiled_eval_mean_s)},
            {"plain_us", us(p.plain_mean_s)},
            {"plain_min_us", us(p.plain_min_s)},
            {"forward_vs_plain_pct", pct(p.forward_mean_s - p.plain_mean_s, p.plain_mean_s)},
            {"forward_vs_plain_min_pct", pct(p.forward_min_s - p.plain_min_s, p.plain_min_s)}}}};
}

void print_pass(const runtime::PassProfile& p) {
  std::printf("\n%s, %d samples (time per pass: mean and min over the samples)\n\n",
              pass_title(p).c_str(), p.n_samples);
  std::printf(
      "| stage | kind | layers | µs mean | µs min | weights MB | KV MB | act MB | GB/s | share "
      "|\n");
  std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  uint64_t w = 0, kv = 0, act = 0;
  for (const runtime::StageRow& r : p.stages) {
    std::printf("| %s | %s | %s | %.1f | %.1f | %.3f | %.3f | %.3f | %.1f | %.1f %% |\n",
                std::string(stage_name(r.stage)).c_str(),
                std::string(runtime::scope_name(r.scope)).c_str(),
                r.n_layers > 0 ? std::to_string(r.n_layers).c_str() : "", us(r.mean_s), us(r.min_s),
                mb(r.bytes.weights), mb(r.bytes.kv), mb(r.bytes.activations),
                gbps(r.bytes.total(), r.mean_s), pct(r.mean_s, p.stages_mean_s));
    w += r.bytes.weights;
    kv += r.bytes.kv;
    act += r.bytes.activations;
  }
  std::printf("| all stages | | | %.1f | | %.3f | %.3f | %.3f | %.1f | 100.0 %% |\n",
              us(p.stages_mean_s), mb(w), mb(kv), mb(act), gbps(w + kv + act, p.stages_mean_s));
  std::printf(
      "\nforward stages %.1f µs (min %.1f)%s; plain eval, timed as gem bench times it, "
      "%.1f µs (min %.1f): stages %+.1f %% of it (min to min %+.1f %%); the profiled evals "
      "took %.1f µs\n",
      us(p.forward_mean_s), us(p.forward_min_s),
      p.stages_mean_s > p.forward_mean_s
          ? strprintf(" + sample %.1f µs", us(p.stages_mean_s - p.forward_mean_s)).c_str()
          : "",
      us(p.plain_mean_s), us(p.plain_min_s), pct(p.forward_mean_s - p.plain_mean_s, p.plain_mean_s),
      pct(p.forward_min_s - p.plain_min_s, p.plain_min_s), us(p.profiled_eval_mean_s));
}

nlohmann::json sweep_json(const std::vector<runtime::AttentionPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const runtime::AttentionPoint& p : points) {
    nlohmann::json j = {
        {"depth", p.depth}, {"samples", p.n_samples}, {"forward_us", us(p.forward_mean_s)}};
    for (const runtime::StageRow* r : {&p.sliding, &p.full}) {
      j[r == &p.sliding ? "sliding" : "full"] = {{"layers", r->n_layers},
                                                 {"mean_us", us(r->mean_s)},
                                                 {"min_us", us(r->min_s)},
                                                 {"kv_bytes", r->bytes.kv},
                                                 {"bytes", r->bytes.total()},
                                                 {"gbps", gbps(r->bytes.total(), r->mean_s)},
                                                 {"share_pct", pct(r->mean_s, p.forward_mean_s)}};
    }
    out.push_back(j);
  }
  return out;
}

void print_sweep(const std::vector<runtime::AttentionPoint>& points) {
  std::printf(
      "\nattention of a decode step by depth (time per step: mean and min over the samples)\n\n");
  std::printf("| depth | kind | layers | µs mean | µs min | KV MB | GB/s | share of step |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const runtime::AttentionPoint& p : points) {
    for (const runtime::StageRow* r : {&p.sliding, &p.full}) {
      if (r->n_layers == 0) continue;
      std::printf("| %d | %s | %d | %.1f | %.1f | %.3f | %.1f | %.1f %% |\n", p.depth,
                  std::string(runtime::scope_name(r->scope)).c_str(), r->n_layers, us(r->mean_s),
                  us(r->min_s), mb(r->bytes.kv), gbps(r->bytes.total(), r->mean_s),
                  pct(r->mean_s, p.forward_mean_s));
    }
  }
}

int run_profile(const ProfileArgs& a) {
  const char* cmd = "profile";
  std::vector<int> rows, batch, verify, sweep;
  if (!a.sweep.empty()) {
    auto s = parse_int_list("--attention-sweep", a.sweep, 0);
    if (!s.ok()) return fail(cmd, s.message());
    sweep = *s;
  } else {
    if (!a.rows.empty()) {
      auto r = parse_int_list("--rows", a.rows, 1);
      if (!r.ok()) return fail(cmd, r.message());
      rows = *r;
    }
    if (!a.parallel.empty()) {
      auto p = parse_int_list("--parallel", a.parallel, 1);
      if (!p.ok()) return fail(cmd, p.message());
      batch = *p;
    }
    if (!a.verify.empty()) {
      auto v = parse_int_list("--verify", a.verify, 1);
      if (!v.ok()) return fail(cmd, v.message());
      verify = *v;
    }
  }
  const int max_tile = rows.empty() ? 1 : *std::max_element(rows.begin(), rows.end());
  const int max_rows =
      std::max(max_tile, verify.empty() ? 1 : *std::max_element(verify.begin(), verify.end()));
  const int max_depth = sweep.empty() ? a.depth : *std::max_element(sweep.begin(), sweep.end());
  const int need_ctx = max_depth + max_rows;
  BackendFlags bf = a.backend;
  const int max_batch = batch.empty() ? 0 : *std::max_element(batch.begin(), batch.end());
  bf.n_slots = std::max(1, max_batch);
  if (bf.n_ctx == 0) bf.n_ctx = need_ctx;
  if (bf.n_ctx < need_ctx) {
    return fail(cmd, strprintf("-c %d is smaller than the depth %d + %d rows", bf.n_ctx, max_depth,
                               max_rows));
  }
  bf.n_tile = a.tile > 0 ? a.tile : std::max(512, max_tile);
  if (bf.n_tile < max_tile) {
    return fail(cmd, strprintf("--tile %d is smaller than --rows %d (a pass is one tile)",
                               bf.n_tile, max_tile));
  }

  auto loaded = model::load_model(a.model);
  if (!loaded.ok()) return fail(cmd, "loading " + a.model + ": " + loaded.message());
  const model::Model& m = **loaded;
  auto made = make_backend(m, bf);
  if (!made.ok()) return fail(cmd, made.message());
  Backend& b = **made;

  StageProfiler profiler(a.timing);
  nlohmann::json out = {
      {"model", strprintf("gemma4 %s", std::string(model::profile_name(m.config.profile)).c_str())},
      {"file", a.model},
      {"backend", std::string(b.name())},
      {"kv_type", std::string(model::kv_type_name(b.options().kv_type))},
      {"n_ctx", b.options().n_ctx},
      {"n_tile", b.options().n_tile},
      {"threads", b.options().n_threads},
      {"build_commit", build_commit()}};
  runtime::ProfileReport report;
  std::vector<runtime::AttentionPoint> points;
  if (!sweep.empty()) {
    auto r = runtime::profile_attention(b, m, sweep, a.n_samples, 42, profiler);
    if (!r.ok()) return fail(cmd, r.message());
    points = std::move(r).value();
    report.method = profiler.method();
  } else {
    runtime::ProfileOptions o;
    o.depth = a.depth;
    o.rows = rows;
    o.batch = batch;
    o.verify = verify;
    o.n_samples = a.n_samples;
    o.sample = !a.no_sample;
    auto r = runtime::profile_stages(b, m, o, profiler);
    if (!r.ok()) return fail(cmd, r.message());
    report = std::move(r).value();
  }
  out["method"] = report.method;
  if (sweep.empty()) {
    out["passes"] = nlohmann::json::array();
    for (const runtime::PassProfile& p : report.passes) out["passes"].push_back(pass_json(p));
  } else {
    out["attention_sweep"] = sweep_json(points);
  }
  if (!a.json_file.empty()) {
    std::ofstream f(a.json_file);
    f << out.dump(2) << "\n";
    if (!f) return fail(cmd, "cannot write " + a.json_file);
  }
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("gem profile: %s, %s, backend %s, kv %s, context %d, tile %d\n",
              out["model"].get<std::string>().c_str(), a.model.c_str(),
              std::string(b.name()).c_str(), out["kv_type"].get<std::string>().c_str(),
              b.options().n_ctx, b.options().n_tile);
  if (b.name().starts_with("cpu")) {
    std::printf("cpu kernels: %s\n", cpu::isa_description().c_str());
  }
  std::printf("timing: %s\n", report.method.c_str());
  for (const runtime::PassProfile& p : report.passes) print_pass(p);
  if (!points.empty()) print_sweep(points);
  std::printf("\nbuild: %s\n", build_commit());
  return 0;
}

RunFn setup_profile(CLI::App& sub) {
  auto a = std::make_shared<ProfileArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* depth = sub.add_option("-d,--depth", a->depth, "cache depth every sample starts from")
                    ->check(CLI::Range(0, 1 << 30));
  sub.add_option("-n,--samples", a->n_samples, "timed samples per pass (each also timed plain)")
      ->check(CLI::Range(1, 1000000));
  auto* rows = sub.add_option("--rows", a->rows,
                              "pass shapes, comma-separated: 1 = a decode step, N = a prompt tile "
                              "of N rows (e.g. 1,512); empty with --parallel or --verify: none");
  auto* parallel = sub.add_option(
      "--parallel", a->parallel,
      "batched decode steps, comma-separated: B sequences (slots) at the depth, one row each, "
      "every row's logits (gem bench --parallel's step; e.g. 8,32)");
  auto* verify = sub.add_option(
      "--verify", a->verify,
      "speculative verifications, comma-separated: N rows of one sequence at consecutive "
      "positions from the depth, every row's logits (a round's check of N-1 drafts; e.g. 8)");
  sub.add_option("--attention-sweep", a->sweep,
                 "only attention of a decode step, at each of these depths (comma-separated)")
      ->excludes(depth)
      ->excludes(rows)
      ->excludes(parallel)
      ->excludes(verify);
  sub.add_flag("--json", a->json, "JSON instead of the tables");
  sub.add_option("--json-file", a->json_file, "also write the JSON to this file");
  sub.add_flag("--no-sample", a->no_sample,
               "do not time picking the tokens of a decode step (or of every row of a batched "
               "step or a verification)");
  sub.add_option("--timing", a->timing,
                 "how the backend times its stages: auto, or on CUDA graph-side (events beside "
                 "the decode graph's chain, the default), graph-inline (events in it) or eager")
      ->check(CLI::IsMember({"auto", "graph-side", "graph-inline", "eager"}));
  sub.add_option("--backend", a->backend.backend, "cpu, cuda or auto (CUDA when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("-c,--ctx-size", a->backend.n_ctx,
                 "context size (default: depth + the largest pass)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--kv-type", a->backend.kv_type,
                 "KV cache storage: f32, f16 (default) or f16-full")
      ->check(CLI::IsMember({"f32", "f16", "f16-full"}));
  sub.add_option("-t,--threads", a->backend.n_threads, "CPU threads (0: all)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--tile", a->tile, "the backend's prompt tile (default: max(512, largest --rows))")
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--reference", a->backend.reference, "CPU: the plain scalar reference path");
  return [a] { return run_profile(*a); };
}

GEM_COMMAND(profile,
            "Time each stage of a decode step, a prompt tile, a batched decode step or a "
            "speculative verification (per layer kind, bytes/s)",
            setup_profile);

}  // namespace
}  // namespace gem::cli
