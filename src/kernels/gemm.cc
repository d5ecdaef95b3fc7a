#include "kernels/gemm.h"

#include <Eigen/Core>

#if FCP_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "fcp/check.h"

namespace fcp::kernels {
namespace {

using RowMajor =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstView = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using View = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

template <class OpA, class OpB>
void Accumulate(const OpA& a, const OpB& b, float alpha, float beta, View& c) {
  // beta == 0 must not read C (BLAS semantics: it may hold garbage or NaN).
  if (beta == 0.0f) {
    c.noalias() = alpha * (a * b);
  } else {
    c *= beta;
    c.noalias() += alpha * (a * b);
  }
}

}  // namespace

void PortableGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc) {
  const ConstView av(a, trans_a ? k : m, trans_a ? m : k,
                     Eigen::OuterStride<>(lda));
  const ConstView bv(b, trans_b ? n : k, trans_b ? k : n,
                     Eigen::OuterStride<>(ldb));
  View cv(c, m, n, Eigen::OuterStride<>(ldc));
  if (trans_a && trans_b) {
    Accumulate(av.transpose(), bv.transpose(), alpha, beta, cv);
  } else if (trans_a) {
    Accumulate(av.transpose(), bv, alpha, beta, cv);
  } else if (trans_b) {
    Accumulate(av, bv.transpose(), alpha, beta, cv);
  } else {
    Accumulate(av, bv, alpha, beta, cv);
  }
}

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc) {
  FCP_CHECK(m >= 0 && n >= 0 && k >= 0);
  FCP_CHECK(lda >= (trans_a ? (m > 0 ? m : 1) : (k > 0 ? k : 1)));
  FCP_CHECK(ldb >= (trans_b ? (k > 0 ? k : 1) : (n > 0 ? n : 1)));
  FCP_CHECK(ldc >= (n > 0 ? n : 1));
  if (m == 0 || n == 0) return;
#if FCP_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
#else
  PortableGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

void Linear(const float* x, const float* w, int m, int n, int k, float* y,
            bool accumulate) {
  Gemm(false, true, m, n, k, 1.0f, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
}

#if FCP_HAVE_OPENBLAS
void SetBlasThreads(int num_threads) {
  openblas_set_num_threads(num_threads < 1 ? 1 : num_threads);
}

int BlasThreads() { return openblas_get_num_threads(); }
#else
// Eigen without OpenMP multiplies on the calling thread only.
void SetBlasThreads(int /*num_threads*/) {}

int BlasThreads() { return 1; }
#endif

bool HaveOpenBlas() { return FCP_HAVE_OPENBLAS != 0; }

}  // namespace fcp::kernels
