// The mma kernel's Q4_0 instances: one matrix and the gated pair, 8, 16 and 32 tokens, each form.
#include "backend/cuda/matmul_n_mma.cuh"

namespace gem::cuda::mmn {

// Forms (row tiles per warp and matrix kMT, weight chunks in flight kP, x chunks ahead kL; 64
// bytes per row and chunk): 0 x three chunks ahead, 1 one chunk ahead (less shared memory: the
// faster at 32 tokens). Deeper weight rings and narrower tiles measured no faster
// (bench/results/matmul_n.md).
int launch_mma_q4_0(const NArgs& a, int split, cudaStream_t s) {
  constexpr WType kT = WType::kQ4_0;
  if (a.n_mats == 2) {
    return a.form == 1 ? launch_nt<kT, 2, 1, 2, 1>(a, split, s) : launch_nt<kT, 2, 1, 2, 3>(a, split, s);
  }
  return a.form == 1 ? launch_nt<kT, 1, 2, 2, 1>(a, split, s) : launch_nt<kT, 1, 2, 2, 3>(a, split, s);
}

}  // namespace gem::cuda::mmn
