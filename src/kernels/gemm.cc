#include "kernels/gemm.h"

#include <cblas.h>

#include "fcp/check.h"

namespace fcp::kernels {

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc) {
  FCP_CHECK(m >= 0 && n >= 0 && k >= 0);
  FCP_CHECK(lda >= (trans_a ? (m > 0 ? m : 1) : (k > 0 ? k : 1)));
  FCP_CHECK(ldb >= (trans_b ? (k > 0 ? k : 1) : (n > 0 ? n : 1)));
  FCP_CHECK(ldc >= (n > 0 ? n : 1));
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

void Linear(const float* x, const float* w, int m, int n, int k, float* y,
            bool accumulate) {
  Gemm(false, true, m, n, k, 1.0f, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
}

void SetBlasThreads(int num_threads) {
  openblas_set_num_threads(num_threads < 1 ? 1 : num_threads);
}

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace fcp::kernels
