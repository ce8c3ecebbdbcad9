// A CUPTI injection library that records every kernel's start and end (graph nodes included) and
// writes them as CSV, for timelines of decode steps where nsys is not installed:
//   CUDA_INJECTION64_PATH=/path/libgem_kernel_trace.so GEM_KERNEL_TRACE=trace.csv gem bench ...
// then bench/cuda/nsys_steps.py trace.csv. Columns follow nsys's cuda_gpu_trace report.
// Build: bench/cuda/kernel_trace.sh (not part of gem; never linked into it).
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

std::FILE* g_out = nullptr;
std::mutex g_mu;
constexpr size_t kBufBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufBytes));
  *size = kBufBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    int status = 0;
    char* name = abi::__cxa_demangle(k->name, nullptr, nullptr, &status);
    std::fprintf(g_out, "%llu,%llu,%d,%d,%d,\"%s\"\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end - k->start), k->gridX, k->gridY, k->gridZ,
                 status == 0 && name ? name : k->name);
    std::free(name);
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  if (g_out) std::fflush(g_out);
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("GEM_KERNEL_TRACE");
  g_out = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!g_out) return 0;
  std::fprintf(g_out, "Start (ns),Duration (ns),GrdX,GrdY,GrdZ,Name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity setup failed\n");
    return 0;
  }
  std::atexit(flush_at_exit);
  return 1;
}
