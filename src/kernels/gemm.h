// Thin row-major wrappers over OpenBLAS cblas_sgemm for the transformer's
// projection and MLP GEMMs, shared by the executor and the profiler. Builds
// without OpenBLAS (FCP_WITH_OPENBLAS=OFF: the pip wheel, which must not link
// system libraries) multiply with Eigen instead (PortableGemm).
// Thread-safety: Gemm is reentrant (OpenBLAS may use its own thread pool; see
// SetBlasThreads). fp32 throughout.
#pragma once

#include <cstdint>

namespace fcp::kernels {

// C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is m x k: A is [m, lda>=k] when !trans_a, [k, lda>=m] when trans_a.
// op(B) is k x n: B is [k, ldb>=n] when !trans_b, [n, ldb>=k] when trans_b.
// Bad dimensions are a bug (FCP_CHECK).
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc);

// The same product with Eigen, whatever the build: Gemm without OpenBLAS.
// Expects Gemm's checked arguments.
void PortableGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc);

// Whether Gemm runs OpenBLAS (false: PortableGemm).
bool HaveOpenBlas();

// Y[m x n] = X[m x k] * W^T with W stored [n, k] (a linear layer, y = x W^T),
// optionally accumulating (beta = 1).
void Linear(const float* x, const float* w, int m, int n, int k, float* y,
            bool accumulate = false);

// Sets OpenBLAS's thread count (1 under MPI so ranks do not oversubscribe
// cores; without OpenBLAS Gemm is single-threaded and this does nothing).
// Not thread-safe with concurrent Gemm calls.
void SetBlasThreads(int num_threads);
int BlasThreads();

// FLOPs of one Gemm: 2·m·n·k.
inline double GemmFlops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) *
         static_cast<double>(k);
}

}  // namespace fcp::kernels
