// CUDA benchmark of the n-token products (backend/cuda/matmul_n.cuh) at the 12B and 31B shapes,
// n = 1, 2, 4, 8, 16, 32 (or --n LIST), against the two ways gem has without them: the decode
// matvec over n tokens (weights read once per token) and the tile path (dequantise to f16 +
// cuBLAS, as forward_cuda.cu's gemm). Up to 32 tokens every kernel, form and (without --quick)
// split of K is timed; above, the automatic choice and the tile path only. Prints µs per
// product, weight GB/s, TFLOP/s and the multiple of the one-token matvec, then per model the sum
// over one forward's products. Results: bench/results/matmul_n.md.
// Weights are random but valid (scales in range); enough copies are cycled that every launch
// reads from HBM (≥ 512 MB per sweep, L2 is 50 MB). Our kernels are timed as a CUDA graph of
// back-to-back launches (PDL on, as in the forward), the cuBLAS path as eager launches; median
// of 7 replays.
// The rows pass's products (matmul_rows_variant: the production rule, and the tensor-core kernel
// at every n) are timed beside them; --rows times only those and the matvec baseline.
// Usage: gem_matmul_n_bench [--quick] [--rows] [--n 1,2,4] [--only NAME] [--csv FILE]
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/matmul_n.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/types.cuh"

namespace gem::cuda {
namespace {

#define CK(expr)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__global__ void fill_bytes(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n / 8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    reinterpret_cast<uint64_t*>(p)[i] = mix(seed ^ static_cast<uint64_t>(i));
  }
}
__device__ __forceinline__ __half scale_of(uint64_t h, float lo, float hi) {
  return __float2half(lo + (hi - lo) * static_cast<float>(h % 10000) / 10000.0f);
}
__global__ void fill_scales(__half* d, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    d[i] = scale_of(mix(seed + static_cast<uint64_t>(i)), 0.001f, 0.02f);
  }
}
// Q6_K super-blocks: random quants, sub-block scales in ±60, d in [1e-4, 1e-3].
__global__ void fix_q6k(uint8_t* raw, int64_t n_sb, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_sb;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint8_t* sb = raw + i * 210;
    const uint64_t h = mix(seed + static_cast<uint64_t>(i));
    for (int k = 0; k < 16; ++k) sb[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>((h >> (4 * k)) % 121) - 60));
    *reinterpret_cast<__half*>(sb + 208) = scale_of(h >> 7, 1e-4f, 1e-3f);
  }
}
__global__ void fill_x(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed + static_cast<uint64_t>(i));
    x[i] = static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 2e-6f;
  }
}

double weight_bytes(WType t, int64_t rows, int64_t cols) {
  switch (t) {
    case WType::kQ4_0: return rows * cols * (0.5 + 2.0 / 32);
    case WType::kQ8_0: return rows * cols * (1.0 + 2.0 / 32);
    case WType::kQ6_K: return rows * cols * (210.0 / 256);
    default: return rows * cols * 4.0;
  }
}

DevMatrix make_matrix(WType t, int64_t rows, int64_t cols, uint64_t seed) {
  DevMatrix m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  if (t == WType::kQ6_K) {
    const int64_t n_sb = rows * cols / 256;
    CK(cudaMalloc(&m.raw, n_sb * 210 + 16));
    fill_bytes<<<2048, 256>>>(m.raw, n_sb * 210, seed);
    fix_q6k<<<2048, 256>>>(m.raw, n_sb, seed);
  } else {
    const int64_t qbytes = t == WType::kQ4_0 ? rows * cols / 2 : rows * cols;
    CK(cudaMalloc(&m.qs, qbytes));
    CK(cudaMalloc(&m.d, rows * cols / 32 * sizeof(__half)));
    fill_bytes<<<2048, 256>>>(m.qs, qbytes, seed);
    fill_scales<<<2048, 256>>>(m.d, rows * cols / 32, seed * 7);
  }
  CK(cudaGetLastError());
  return m;
}
void free_matrix(DevMatrix& m) {
  cudaFree(m.raw);
  cudaFree(m.qs);
  cudaFree(m.d);
  m = DevMatrix{};
}

struct Shape {
  const char* model;
  const char* name;
  int64_t rows, cols;
  bool gated;
  WType type;
  int per_forward;  // products of this shape in one forward (for the per-model sum)
};

// 12B: 48 layers, 40 sliding (16 heads × 256, 8 KV heads) + 8 full (16 × 512, 1 KV head, V = K).
// 31B: 60 layers, 50 sliding (32 × 256, 16 KV) + 10 full (32 × 512, 4 KV). Head: 262144 rows.
const Shape kShapes[] = {
    {"12B", "qkv_swa", 8192, 3840, false, WType::kQ4_0, 40},
    {"12B", "qkv_full", 8704, 3840, false, WType::kQ4_0, 8},
    {"12B", "wo_swa", 3840, 4096, false, WType::kQ4_0, 40},
    {"12B", "wo_full", 3840, 8192, false, WType::kQ4_0, 8},
    {"12B", "gate_up", 15360, 3840, true, WType::kQ4_0, 48},
    {"12B", "down", 3840, 15360, false, WType::kQ4_0, 48},
    {"12B", "head_q8", 262144, 3840, false, WType::kQ8_0, 1},
    {"12B", "head_q6k", 262144, 3840, false, WType::kQ6_K, 0},
    {"31B", "qkv_swa", 16384, 5376, false, WType::kQ4_0, 50},
    {"31B", "qkv_full", 18432, 5376, false, WType::kQ4_0, 10},
    {"31B", "wo_swa", 5376, 8192, false, WType::kQ4_0, 50},
    {"31B", "wo_full", 5376, 16384, false, WType::kQ4_0, 10},
    {"31B", "gate_up", 21504, 5376, true, WType::kQ4_0, 60},
    {"31B", "down", 5376, 21504, false, WType::kQ4_0, 60},
    {"31B", "head_q8", 262144, 5376, false, WType::kQ8_0, 1},
    {"31B", "head_q6k", 262144, 5376, false, WType::kQ6_K, 0},
};

struct Bench {
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cublasHandle_t cublas = nullptr;
  FILE* csv = nullptr;
};

// Median over 7 replays of the time of one call of `body(k)` (k = launch index), with `reps`
// calls per replay (captured as a graph when `graph`).
double time_us(Bench& b, const std::function<void(int)>& body, bool graph) {
  // One call first (warm-up; module load), then a timed one to size the replay.
  body(0);
  CK(cudaStreamSynchronize(b.s));
  CK(cudaEventRecord(b.e0, b.s));
  body(1);
  CK(cudaEventRecord(b.e1, b.s));
  CK(cudaEventSynchronize(b.e1));
  float one_ms = 0;
  CK(cudaEventElapsedTime(&one_ms, b.e0, b.e1));
  const int reps = std::clamp(static_cast<int>(3.0 / std::max(one_ms, 1e-3f)), 4, 200);
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(b.s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < reps; ++k) body(k);
    CK(cudaStreamEndCapture(b.s, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    CK(cudaGraphLaunch(exec, b.s));  // warm
  }
  std::vector<float> ms;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(b.e0, b.s));
    if (graph) {
      CK(cudaGraphLaunch(exec, b.s));
    } else {
      for (int k = 0; k < reps; ++k) body(k);
    }
    CK(cudaEventRecord(b.e1, b.s));
    CK(cudaEventSynchronize(b.e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, b.e0, b.e1));
    ms.push_back(t);
  }
  if (exec) cudaGraphExecDestroy(exec);
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2] / reps;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

double copy_bandwidth(Bench& b) {
  const size_t n = size_t{2} << 30;
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, n));
  CK(cudaMalloc(&dst, n));
  fill_bytes<<<2048, 256>>>(static_cast<uint8_t*>(src), static_cast<int64_t>(n), 1);
  const double us = time_us(b, [&](int) { CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, b.s)); }, false);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * n / (us * 1e-6) / 1e9;
}

int run(int argc, char** argv) {
  std::vector<int> ns = {1, 2, 4, 8, 16, 32};
  bool quick = false;
  bool rows_only = false;  // only the matvec baseline and the rows pass's products
  std::string only;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--rows") {
      rows_only = true;

    } else if (a == "--n" && i + 1 < argc) {
      ns = parse_list(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--csv" && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: gem_matmul_n_bench [--quick] [--rows] [--n 1,2,4] [--only NAME] [--csv FILE]\n");
      return 2;
    }
  }
  Bench b;
  CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&b.e0));
  CK(cudaEventCreate(&b.e1));
  if (cublasCreate(&b.cublas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(b.cublas, b.s);
  if (csv_path) {
    b.csv = std::fopen(csv_path, "w");
    if (b.csv) std::fprintf(b.csv, "model,shape,rows,cols,n,method,split,us,weight_GBps,TFLOPs,x_matvec1\n");
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth(b);
  std::printf("%s, %d SMs, L2 %d MB; device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, bw);
  std::printf("matmul_n_max() = %d\n", matmul_n_max());

  const int max_n = *std::max_element(ns.begin(), ns.end());
  // Per model and n, the sum over one forward's products of each method's time.
  std::map<std::string, std::map<int, std::map<std::string, double>>> sums;

  for (const Shape& sh : kShapes) {
    if (!only.empty() && only != sh.name && only != std::string(sh.model) + "/" + sh.name) continue;
    if (quick && sh.type == WType::kQ6_K) continue;
    const int mats = sh.gated ? 2 : 1;
    const double wb = mats * weight_bytes(sh.type, sh.rows, sh.cols);
    const int copies = static_cast<int>(std::clamp(std::ceil(512e6 / wb), 1.0, 16.0));
    std::vector<DevMatrix> w(copies * mats);
    for (int k = 0; k < copies * mats; ++k) w[k] = make_matrix(sh.type, sh.rows, sh.cols, 1000 + k);
    float *x = nullptr, *y = nullptr, *gu = nullptr;
    __half *x16 = nullptr, *w16 = nullptr;
    Q8Act xq;
    CK(cudaMalloc(&x, sizeof(float) * max_n * sh.cols));
    CK(cudaMalloc(&y, sizeof(float) * max_n * sh.rows * 2));
    CK(cudaMalloc(&gu, sizeof(float) * max_n * sh.rows * 2));
    CK(cudaMalloc(&x16, sizeof(__half) * max_n * sh.cols));
    CK(cudaMalloc(&w16, sizeof(__half) * mats * sh.rows * sh.cols));
    CK(cudaMalloc(&xq.q, max_n * sh.cols));
    CK(cudaMalloc(&xq.ds, sizeof(Q8Ds) * max_n * sh.cols / 32));
    fill_x<<<1024, 256>>>(x, max_n * sh.cols, 99);
    quantize_q8(x, max_n, static_cast<int>(sh.cols), xq, b.s);
    CK(cudaStreamSynchronize(b.s));
    CK(cudaDeviceSynchronize());

    double t_mv1 = 0;
    for (int n : ns) {
      double best = 1e30;  // the fastest of our kernels and splits at this n
      const double flops = 2.0 * mats * sh.rows * sh.cols * n;
      auto report = [&](const char* method, int split, double us) {
        if (n == 1 && std::string(method) == "matvec") t_mv1 = us;
        const double gbs = wb / (us * 1e-6) / 1e9;
        std::printf("%-4s %-9s n=%-3d %-11s split %-2d %9.2f us %7.0f GB/s %6.1f TFLOP/s %6.2fx\n",
                    sh.model, sh.name, n, method, split, us, gbs, flops / (us * 1e-6) / 1e12,
                    t_mv1 > 0 ? us / t_mv1 : 0.0);
        if (b.csv) {
          std::fprintf(b.csv, "%s,%s,%lld,%lld,%d,%s,%d,%.3f,%.1f,%.3f,%.3f\n", sh.model, sh.name,
                       static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), n, method,
                       split, us, gbs, flops / (us * 1e-6) / 1e12, t_mv1 > 0 ? us / t_mv1 : 0.0);
          std::fflush(b.csv);
        }
        if (sh.per_forward > 0) sums[sh.model][n][method] += sh.per_forward * us;
        if (std::string(method) != "matvec" && std::string(method) != "cublas") best = std::min(best, us);
      };
      auto mat = [&](int k, int m) -> const DevMatrix& { return w[(k % copies) * mats + m]; };
      // The baseline: the decode kernels over n tokens (grid.y = n).
      if (n <= 32) report("matvec", 0, time_us(b, [&](int k) {
               if (sh.gated) {
                 if (sh.type == WType::kQ4_0) matvec_gated(mat(k, 0), mat(k, 1), xq, n, y, b.s);
               } else {
                 matvec(mat(k, 0), x, xq, n, y, 0.0f, b.s);
               }
             }, true));
      auto variant = [&](MatmulNKernel kern, int split, int form) {
        return time_us(b, [&](int k) {
          matmul_n_variant({kern, split, form}, mat(k, 0), sh.gated ? &mat(k, 1) : nullptr, x, xq,
                           n, y, 0.0f, b.s);
        }, true);
      };
      if (!rows_only) report("auto", 0, variant(MatmulNKernel::kAuto, 0, 0));
      static const char* kDp4aNames[] = {"dp4a", "dp4a_f1"};
      static const char* kMmaNames[] = {"mma", "mma_near"};  // x three / one chunk ahead
      const bool sweep = n <= 32 && !rows_only;  // above, only the automatic choice against the tile path
      if (n >= 2 && n <= 8 && sweep && matmul_n_supports(MatmulNKernel::kDp4a, mat(0, 0))) {
        for (int f = 0; f < matmul_n_forms(MatmulNKernel::kDp4a); ++f) {
          report(kDp4aNames[f], 0, variant(MatmulNKernel::kDp4a, 0, f));
        }
      }
      if (n >= 2 && sweep && matmul_n_supports(MatmulNKernel::kMma, mat(0, 0))) {
        for (int f = 0; f < matmul_n_forms(MatmulNKernel::kMma); ++f) {
          report(kMmaNames[f], 0, variant(MatmulNKernel::kMma, 0, f));
        }
        if (!quick) {
          for (int split : {1, 2, 4, 8, 16}) report("mma_split", split, variant(MatmulNKernel::kMma, split, 0));
        }
      }
      // The rows pass's products (each row equal to its decode step): the production rule, and
      // the tensor-core kernel at every n.
      if (n >= 2 && n <= 32 && sh.type != WType::kQ6_K) {
        for (const bool mma : {false, true}) {
          const double us = time_us(b, [&](int k) {
            matmul_rows_variant(mma, mat(k, 0), sh.gated ? &mat(k, 1) : nullptr, x, xq, n, y, 0.0f, b.s);
          }, true);
          const double keep = best;
          report(mma ? "rows_mma" : "rows", 0, us);
          best = keep;  // `best` is the n-token products' (free arithmetic) figure
        }
      }
      // The tile path: x to f16, each matrix dequantised to f16, one cuBLAS product (gate|up
      // stacked, then the GELU gating), as forward_cuda.cu's layer_prefill.
      if (!rows_only) report("cublas", 0, time_us(b, [&](int k) {
               to_f16(x, static_cast<int64_t>(n) * sh.cols, x16, b.s);
               for (int m = 0; m < mats; ++m) dequant_f16(mat(k, m), 0, sh.rows, w16 + m * sh.rows * sh.cols, b.s);
               const float alpha = 1.0f, beta = 0.0f;
               const int rows = static_cast<int>(mats * sh.rows), cols = static_cast<int>(sh.cols);
               cublasGemmEx(b.cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w16, CUDA_R_16F,
                            cols, x16, CUDA_R_16F, cols, &beta, sh.gated ? gu : y, CUDA_R_32F, rows,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
               if (sh.gated) gelu_mul(gu, n, static_cast<int>(sh.rows), y, b.s);
             }, false));
      // (--rows times no n-token product: no `best` then)
      if (sh.per_forward > 0 && best < 1e30) sums[sh.model][n]["best"] += sh.per_forward * best;
    }
    for (DevMatrix& m : w) free_matrix(m);
    cudaFree(x);
    cudaFree(y);
    cudaFree(gu);
    cudaFree(x16);
    cudaFree(w16);
    cudaFree(xq.q);
    cudaFree(xq.ds);
  }

  // One forward's products (layers and head) per method, and the multiple of n = 1's matvec.
  std::printf("\nproducts of one forward (ms), and x the one-token matvec:\n");
  for (auto& [model, by_n] : sums) {
    const double base = by_n.count(1) ? by_n[1]["matvec"] : 0.0;
    for (auto& [n, by_m] : by_n) {
      std::printf("%s n=%-3d", model.c_str(), n);
      for (const char* m : {"matvec", "auto", "best", "dp4a", "mma", "mma_near", "cublas", "rows",
                            "rows_mma"}) {
        if (!by_m.count(m)) continue;
        std::printf("  %s %.3f (%.2fx)", m, by_m[m] / 1e3, base > 0 ? by_m[m] / base : 0.0);
      }
      std::printf("\n");
    }
  }
  if (b.csv) std::fclose(b.csv);
  return 0;
}

}  // namespace
}  // namespace gem::cuda

int main(int argc, char** argv) { return gem::cuda::run(argc, argv); }
