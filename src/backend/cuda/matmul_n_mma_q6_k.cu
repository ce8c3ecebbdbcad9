// The mma kernel's Q6_K instances (the output head): 8, 16 and 32 tokens, each form.
#include "backend/cuda/matmul_n_mma.cuh"

namespace gem::cuda::mmn {

// Forms (row tiles per warp kMT, weight chunks in flight kP, x chunks ahead kL; 104 bytes per
// row and chunk, in 18 words): 0 x three chunks ahead, 1 one chunk ahead.
int launch_mma_q6_k(const NArgs& a, int split, cudaStream_t s) {
  constexpr WType kT = WType::kQ6_K;
  return a.form == 1 ? launch_nt<kT, 1, 1, 1, 1>(a, split, s) : launch_nt<kT, 1, 1, 1, 3>(a, split, s);
}

}  // namespace gem::cuda::mmn
