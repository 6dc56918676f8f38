#include "exec/cuda/lt_matmul.hpp"

#include <algorithm>
#include <cstdint>

#include "exec/cuda/cuda_checks.hpp"

namespace st {
namespace {

// The largest power of two up to 256 that divides the address (256 for null: not read).
int alignment_of(const void* p) {
  if (!p) return 256;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  int a = 1;
  while (a < 256 && address % static_cast<std::uintptr_t>(2 * a) == 0) a *= 2;
  return a;
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::gelu_aux_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  ST_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

}  // namespace

// The descriptors of one key and the algorithm the heuristic gave for it (none: ok false).
struct LtMatmul::Plan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // failures cannot be reported from a destructor
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

LtMatmul::LtMatmul(cudaStream_t stream) : stream_(stream) { ST_CHECK_CUBLAS(cublasLtCreate(&handle_)); }

LtMatmul::~LtMatmul() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

LtMatmul::Key LtMatmul::key_of(const LtProduct& p) const {
  return {static_cast<int>(p.trans_a), static_cast<int>(p.trans_b), p.m, p.n, p.k, p.lda, p.ldb,
          static_cast<int>(p.epilogue), alignment_of(p.A), alignment_of(p.B), alignment_of(p.D), alignment_of(p.bias),
          alignment_of(p.aux), static_cast<int>(p.d_type)};
}

LtMatmul::Plan& LtMatmul::plan_for(const LtProduct& p) {
  const Key key = key_of(p);
  if (const auto found = plans_.find(key); found != plans_.end()) return *found->second;
  // Built aside and kept only once complete: a failing call below leaves nothing cached.
  auto made = std::make_unique<Plan>();
  Plan& plan = *made;
  ST_CHECK_CUBLAS(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(p.epilogue));
  // The heuristic reads the pointers' values (not what they point to) for their alignment.
  if (p.bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux) {
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(p.m));
  }
  // Column-major layouts of the stored matrices: op(A) is m x k, so A is k x m when transposed.
  const bool ta = p.trans_a != CUBLAS_OP_N, tb = p.trans_b != CUBLAS_OP_N;
  ST_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, ta ? p.k : p.m, ta ? p.m : p.k, p.lda));
  ST_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, tb ? p.n : p.k, tb ? p.k : p.n, p.ldb));
  ST_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.d, p.d_type, p.m, p.n, p.m));

  cublasLtMatmulPreference_t preference = nullptr;
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> owned(
      preference, cublasLtMatmulPreferenceDestroy);
  const std::size_t workspace = kWorkspaceBytes;
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                       sizeof workspace));
  const std::uint32_t align_a = static_cast<std::uint32_t>(alignment_of(p.A)),
                      align_b = static_cast<std::uint32_t>(alignment_of(p.B)),
                      align_d = static_cast<std::uint32_t>(alignment_of(p.D));
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                       sizeof align_a));
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                       sizeof align_b));
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                       sizeof align_d));
  ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                       sizeof align_d));
  if (p.d_type != CUDA_R_32F) {
    // A split-K sum must not be reduced in D's narrower type (INPLACE and OUTPUT_TYPE would
    // round each partial sum to bf16): in fp32, or not split, so that D is rounded once.
    const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    ST_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                         &reductions, sizeof reductions));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                               preference, 1, &result, &found);
  // NOT_SUPPORTED: no algorithm for this combination, which the caller handles unfused.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) ST_CHECK_CUBLAS(status);
  plan.ok = status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.ok) plan.algo = result.algo;
  return *plans_.emplace(key, std::move(made)).first->second;
}

bool LtMatmul::supports(const LtProduct& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  if (p.epilogue != LtEpilogue::dgelu && !p.bias) return false;
  if (p.epilogue != LtEpilogue::bias && (!p.aux || p.m % 8 != 0)) return false;  // aux's leading dimension
  for (const void* pointer : {static_cast<const void*>(p.A), static_cast<const void*>(p.B),
                              static_cast<const void*>(p.D), p.bias, static_cast<const void*>(p.aux)})
    if (alignment_of(pointer) < 16) return false;
  return plan_for(p).ok;
}

void LtMatmul::run(const LtProduct& p) {
  Plan& plan = plan_for(p);
  ST_REQUIRE(plan.ok, "cuBLASLt product without an algorithm (ask supports() first)");
  if (p.bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
  void* workspace = workspace_.get(kWorkspaceBytes, stream_);
  const float alpha = 1.0f, beta = 0.0f;
  ST_CHECK_CUBLAS(cublasLtMatmul(handle_, plan.desc, &alpha, p.A, plan.a, p.B, plan.b, &beta, p.D, plan.d, p.D, plan.d,
                                 &plan.algo, workspace, kWorkspaceBytes, stream_));
  ++runs_[static_cast<std::size_t>(p.epilogue)];
}

}  // namespace st
