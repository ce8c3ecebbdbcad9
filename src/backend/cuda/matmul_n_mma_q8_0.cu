// The mma kernel's Q8_0 instances: one matrix (the head, Q8_0 layers) and the gated pair, 8, 16
// and 32 tokens, each form.
#include "backend/cuda/matmul_n_mma.cuh"

namespace gem::cuda::mmn {

// Forms (row tiles per warp and matrix kMT, weight chunks in flight kP, x chunks ahead kL; 128
// bytes per row and chunk): 0 x three chunks ahead, 1 one chunk ahead.
int launch_mma_q8_0(const NArgs& a, int split, cudaStream_t s) {
  constexpr WType kT = WType::kQ8_0;
  if (a.n_mats == 2) {
    return a.form == 1 ? launch_nt<kT, 2, 1, 1, 1>(a, split, s) : launch_nt<kT, 2, 1, 1, 3>(a, split, s);
  }
  return a.form == 1 ? launch_nt<kT, 1, 2, 1, 1>(a, split, s) : launch_nt<kT, 1, 2, 1, 3>(a, split, s);
}

}  // namespace gem::cuda::mmn
