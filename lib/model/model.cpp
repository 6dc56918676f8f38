#include "model/model.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "exec/layer_kernels.hpp"
#include "model/arch.hpp"

namespace st {

namespace {

// The first id outside [0, vocabulary) fails the pass on this rank (the job's error handling
// stops the others) before anything reads it.
void require_in_vocabulary(const int* ids, int count, std::int64_t vocabulary, const char* kind) {
  const int* bad = std::find_if(ids, ids + count, [&](int id) { return id < 0 || id >= vocabulary; });
  if (bad == ids + count) return;
  throw Error(std::string(kind) + " id " + std::to_string(*bad) + " (position " + std::to_string(bad - ids) + " of " +
              std::to_string(count) + " in this pass) is outside the model's vocabulary [0, " +
              std::to_string(vocabulary) + "): the ids must come from a tokenizer of at most model.vocab_size = " +
              std::to_string(vocabulary) + " tokens");
}

}  // namespace

template <class Real, class S>
Model<Real, S>::Model(const ModelShape& shape, Exec& exec, Recompute recompute, TensorGroup tensor, ModelPart part)
    : shape_(shape),
      tensor_(tensor),
      part_(part),
      layout_(make_layout(shape, tensor.split, part)),
      whole_layout_(make_layout(shape)),
      exec_(exec),
      recompute_(recompute),
      bf16_logits_(layer_kernels_of<Real, S>(exec).fused_classifier()),
      kernels_(layer_kernels_of<Real, S>(exec)) {
  ST_REQUIRE(!tensor.active() || (tensor.comm && tensor.comm->size() == tensor.split.degree &&
                                  tensor.comm->rank() == tensor.split.rank),
             "a tensor-parallel model needs its group's communicator");
}

template <class Real, class S>
std::vector<Real> Model<Real, S>::slice_of(std::span<const Real> whole) const {
  ST_REQUIRE(whole.size() == whole_layout_.total(), "whole parameters do not match the model's layout");
  // This rank's slice of every layer, then (for a part of the model) the part's tensors of it.
  const bool whole_part = part_.whole(shape_);
  const ParamLayout sliced = whole_part ? ParamLayout() : make_layout(shape_, tensor_.split);
  const ParamLayout& slice_layout = whole_part ? layout_ : sliced;
  std::vector<Real> slice(slice_layout.total());
  for_each_slice_run(whole_layout_, slice_layout, tensor_.split, [&](std::size_t w, std::size_t s, std::size_t n) {
    std::copy(whole.begin() + static_cast<std::ptrdiff_t>(w), whole.begin() + static_cast<std::ptrdiff_t>(w + n),
              slice.begin() + static_cast<std::ptrdiff_t>(s));
  });
  if (whole_part) return slice;
  std::vector<Real> part(layout_.total());
  for (const TensorSlot* t : layout_.all_tensors())
    std::copy_n(slice.begin() + static_cast<std::ptrdiff_t>(sliced.tensor(t->name).offset), t->size,
                part.begin() + static_cast<std::ptrdiff_t>(t->offset));
  return part;
}

template <class Real, class S>
std::vector<Real> Model<Real, S>::whole_from_slices(std::span<const Real> slice) const {
  ST_REQUIRE(slice.size() == layout_.total(), "a slice does not match the model's layout");
  if (!tensor_.active()) return {slice.begin(), slice.end()};
  // Through the backend's memory: a device communicator gathers device buffers only.
  const auto degree = static_cast<std::size_t>(tensor_.split.degree);
  const std::size_t n = slice.size(), count = (degree + 1) * n;
  Memory staging = exec_.allocate(count * sizeof(Real));
  Real* mine = staging.as<Real>().data();
  Real* all = mine + n;
  exec_.upload(mine, slice.data(), n * sizeof(Real));
  tensor_.comm->all_gather(Buffer::of(std::span<Real>(mine, n), exec_.before_communication()),
                           Buffer::of(std::span<Real>(all, degree * n)));
  std::vector<Real> slices(degree * n);
  exec_.download(slices.data(), all, degree * n * sizeof(Real));
  // The part's tensors whole (the whole model's for the whole model), in the part's order.
  const ParamLayout whole_part = part_.whole(shape_) ? ParamLayout() : make_layout(shape_, {}, part_);
  const ParamLayout& into = part_.whole(shape_) ? whole_layout_ : whole_part;
  std::vector<Real> whole(into.total());
  for (std::size_t r = 0; r < degree; ++r)
    for_each_slice_run(into, layout_, TensorSplit{tensor_.split.degree, static_cast<int>(r)},
                       [&](std::size_t w, std::size_t s, std::size_t count_here) {
                         std::copy_n(slices.data() + r * n + s, count_here, whole.data() + w);
                       });
  return whole;
}

template <class Real, class S>
int Model<Real, S>::vocab_real() const {
  const int real = static_cast<int>(shape_.vocab_size) - vocab_first();
  return std::clamp(real, 0, vocab_rows());
}

template <class Real, class S>
void Model<Real, S>::upload_slice_tokens(int* to, const int* tokens, int count) {
  require_in_vocabulary(tokens, count, shape_.vocab_size, "token");
  const auto n = static_cast<std::size_t>(count);
  if (!tensor_.active()) {
    exec_.upload(to, tokens, n * sizeof(int));
    return;
  }
  const int first = vocab_first(), rows = vocab_rows();
  slice_tokens_.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    slice_tokens_[i] = tokens[i] >= first && tokens[i] < first + rows ? tokens[i] - first : -1;
  exec_.upload(to, slice_tokens_.data(), n * sizeof(int));
}

template <class Real, class S>
void Model<Real, S>::upload_targets(int* to, const int* targets, int count) {
  require_in_vocabulary(targets, count, shape_.vocab_size, "target");
  exec_.upload(to, targets, static_cast<std::size_t>(count) * sizeof(int));
}

template <class Real, class S>
void Model<Real, S>::allocate_batch(std::size_t rows) {
  batch_memory_ = exec_.allocate(2 * rows * sizeof(int));
  tokens_at_ = batch_memory_.template as<int>().data();
  targets_at_ = tokens_at_ + rows;
}

template <class Real, class S>
void Model<Real, S>::reserve_kernel_scratch(LayerKernels<Real, S>& kernels, int max_batch) const {
  kernels.reserve_scratch(
      kernel_workload(shape_, max_batch, tensor_.split.degree, tensor_.active() && tensor_.sequence_parallel, part_));
}

template <class Real, class S>
void Model<Real, S>::take_batch(const int* tokens, const int* targets, int N) {
  if (part_.embeds()) {
    tokens_.assign(tokens, tokens + N);
    upload_slice_tokens(tokens_at_, tokens, N);
  }
  if (targets) targets_.assign(targets, targets + N);
  else targets_.clear();
  if (targets && part_.heads(shape_)) upload_targets(targets_at_, targets, N);
}

template <class Real, class S>
const S* Model<Real, S>::begin_pass(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int N) {
  // Sequence parallelism splits the pass's rows between the split layers over the group.
  rows_split_ = tensor_.active() && tensor_.sequence_parallel;
  ST_REQUIRE(!rows_split_ || N % tensor_.split.degree == 0,
             "sequence parallelism needs the rows of a pass (" + std::to_string(N) + ") to divide by parallel.tensor");
  take_batch(tokens, targets, N);
  if (!part_.holds_embeddings(shape_)) return nullptr;
  buffers.before_forward(0);
  return buffers.params(0);
}

template <class Real, class S>
const S* Model<Real, S>::gather_rows(const S* local, S* whole, std::size_t rows, std::size_t width) {
  if (!rows_split_) return local;
  const std::size_t mine = rows / static_cast<std::size_t>(tensor_.split.degree) * width;
  tensor_.comm->all_gather(Buffer::of(std::span<S>(const_cast<S*>(local), mine), exec_.before_communication()),
                           Buffer::of(std::span<S>(whole, rows * width)));
  return whole;
}

template <class Real, class S>
S* Model<Real, S>::sum_rows(S* whole, S* local, std::size_t rows, std::size_t width) {
  if (!rows_split_) {
    sum_over_tensor_group(whole, rows * width);
    return whole;
  }
  const std::size_t mine = rows / static_cast<std::size_t>(tensor_.split.degree) * width;
  tensor_.comm->reduce_scatter(Buffer::of(std::span<S>(whole, rows * width), exec_.before_communication()),
                               Buffer::of(std::span<S>(local, mine)), ReduceOp::sum);
  return local;
}

template <class Real, class S>
void Model<Real, S>::add_split_row_gradients(Real* G, std::initializer_list<std::size_t> offsets, Real* scratch,
                                             std::size_t width) {
  if (!rows_split_) return;
  sum_over_tensor_group(scratch, offsets.size() * width);
  std::size_t i = 0;
  for (const std::size_t at : offsets) {
    // Gradients are Real: added by the kernels where they are what S is, else by the backend's
    // fp32 accumulation (bf16 storage keeps fp32 gradients).
    if constexpr (std::is_same_v<Real, S>) kernels_.add(G + at, G + at, scratch + width * i, width);
    else exec_.accumulate(Buffer::of(std::span<Real>(G + at, width)), scratch + width * i);
    ++i;
  }
}

namespace {

// Logits stored as bf16 behind a model's S pointer (Model::carve_logits).
template <class S>
Bf16* as_bf16(S* logits) {
  return reinterpret_cast<Bf16*>(logits);
}
template <class S>
const Bf16* as_bf16(const S* logits) {
  return reinterpret_cast<const Bf16*>(logits);
}
// A stored value widened to what the host reads.
template <class Real, class S>
Real to_real(S x) {
  if constexpr (std::is_same_v<S, Bf16>) return static_cast<Real>(to_float(x));
  else return static_cast<Real>(x);
}

}  // namespace

template <class Real, class S>
S* Model<Real, S>::carve_logits(ActivationCarver<Real, S>& take, std::size_t rows) const {
  const std::size_t count = rows * static_cast<std::size_t>(vocab_rows());
  if (bf16_logits_) return reinterpret_cast<S*>(take.bf16(count));
  return take.values(count);
}

template <class Real, class S>
void Model<Real, S>::lm_head(S* logits, const S* in, const S* weight, int rows, int C) {
  if (bf16_logits_) return kernels_.classifier_logits(as_bf16(logits), in, weight, rows, C, vocab_rows());
  kernels_.linear_forward(logits, in, weight, static_cast<const S*>(nullptr), rows, C, vocab_rows());
}

template <class Real, class S>
double Model<Real, S>::forward(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T) {
  if (loss_memory_.bytes() == 0) loss_memory_ = exec_.allocate(sizeof(double));
  double* sum = loss_memory_.template as<double>().data();
  exec_.zero(sum, sizeof(double));
  forward_into(buffers, tokens, targets, B, T, sum);
  double mean = 0;
  exec_.download(&mean, sum, sizeof mean);
  return mean;
}

template <class Real, class S>
void Model<Real, S>::cross_entropy(S* logits, Real* losses, const int* targets, int rows, Real* scratch, LossSum loss) {
  const int V = static_cast<int>(shape_.vocab_size), Vp = static_cast<int>(shape_.padded_vocab);
  if (!tensor_.active()) {
    if (!bf16_logits_) return kernels_.softmax_cross_entropy_forward(logits, losses, targets, rows, V, Vp, loss);
    if (!targets) return kernels_.classifier_softmax(as_bf16(logits), rows, V, Vp);
    return kernels_.classifier_cross_entropy(as_bf16(logits), losses, targets, rows, V, Vp, loss);
  }
  // Megatron's vocabulary-parallel cross-entropy: three numbers per row and slice cross the
  // group instead of the logits.
  const auto n = static_cast<std::size_t>(rows);
  const int degree = tensor_.split.degree;
  Real* stats = scratch;
  Real* gathered = stats + 3 * n;
  Real* row_stats = gathered + 3 * n * static_cast<std::size_t>(degree);
  if (bf16_logits_) kernels_.classifier_slice_stats(as_bf16(logits), targets, stats, rows, vocab_real(), vocab_rows(), vocab_first());
  else kernels_.logit_slice_stats(logits, targets, stats, rows, vocab_real(), vocab_rows(), vocab_first());
  tensor_.comm->all_gather(Buffer::of(std::span<Real>(stats, 3 * n), exec_.before_communication()),
                           Buffer::of(std::span<Real>(gathered, 3 * n * static_cast<std::size_t>(degree))));
  kernels_.logit_slices_combine(gathered, row_stats, losses, targets, rows, degree, loss);
  if (!bf16_logits_) kernels_.logit_slice_softmax(logits, row_stats, rows, vocab_real(), vocab_rows());
  else if (targets)
    kernels_.classifier_slice_dlogits(as_bf16(logits), row_stats, targets, rows, vocab_real(), vocab_rows(), vocab_first());
  else kernels_.classifier_slice_softmax(as_bf16(logits), row_stats, rows, vocab_real(), vocab_rows());
}

template <class Real, class S>
void Model<Real, S>::lm_head_backward(S* din, Real* dweight, S* logits, const S* in, const S* weight,
                                      const int* targets, int rows, int C, Real scale) {
  if (bf16_logits_)
    return kernels_.classifier_backward(din, dweight, as_bf16(logits), in, weight, rows, C, vocab_rows(), scale);
  if (!tensor_.active())
    kernels_.softmax_cross_entropy_backward(logits, targets, rows, static_cast<int>(shape_.vocab_size),
                                            static_cast<int>(shape_.padded_vocab), scale);
  else kernels_.logit_slice_backward(logits, targets, rows, vocab_real(), vocab_rows(), vocab_first(), scale);
  kernels_.linear_backward(din, dweight, static_cast<Real*>(nullptr), logits, in, weight, rows, C, vocab_rows(), false);
}

template <class Real, class S>
std::vector<Real> Model<Real, S>::whole_logits_on_host(const S* logits, std::size_t rows, std::size_t first_row) const {
  const auto V = static_cast<std::size_t>(shape_.vocab_size);
  const auto slice = static_cast<std::size_t>(vocab_rows()), degree = static_cast<std::size_t>(tensor_.split.degree);
  // Every rank's slice of every row, one rank after another (without tensor parallelism, the
  // one slice is the whole padded row); then each row put back together, widened from bf16.
  const std::size_t count = degree * rows * slice, skip = first_row * slice;
  std::vector<Real> parts(count);
  if (!bf16_logits_) {
    logits += skip;
    std::vector<S> stored(count);
    if (!tensor_.active()) {
      exec_.download(stored.data(), logits, count * sizeof(S));
    } else {
      if (gather_memory_.bytes() < count * sizeof(S)) gather_memory_ = exec_.allocate(count * sizeof(S));
      S* at = gather_memory_.as<S>().data();
      tensor_.comm->all_gather(Buffer::of(std::span<S>(const_cast<S*>(logits), rows * slice), exec_.before_communication()),
                               Buffer::of(std::span<S>(at, count)));
      exec_.download(stored.data(), at, count * sizeof(S));
    }
    for (std::size_t i = 0; i < count; ++i) parts[i] = to_real<Real>(stored[i]);
  } else {
    std::vector<Bf16> narrow(count);
    const Bf16* mine = as_bf16(logits) + skip;
    if (!tensor_.active()) {
      exec_.download(narrow.data(), mine, count * sizeof(Bf16));
    } else {
      if (gather_memory_.bytes() < count * sizeof(Bf16)) gather_memory_ = exec_.allocate(count * sizeof(Bf16));
      Bf16* at = gather_memory_.as<Bf16>().data();
      tensor_.comm->all_gather(
          Buffer::of(std::span<Bf16>(const_cast<Bf16*>(mine), rows * slice), exec_.before_communication()),
          Buffer::of(std::span<Bf16>(at, count)));
      exec_.download(narrow.data(), at, count * sizeof(Bf16));
    }
    for (std::size_t i = 0; i < count; ++i) parts[i] = static_cast<Real>(to_float(narrow[i]));
  }
  std::vector<Real> out(rows * V);
  for (std::size_t p = 0; p < degree; ++p)
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t first = p * slice;  // the slice's first column in the whole row
      if (first >= V) continue;
      std::copy_n(parts.data() + (p * rows + r) * slice, std::min(slice, V - first), out.data() + r * V + first);
    }
  return out;
}

template <class Real, class S>
std::span<const Real> Model<Real, S>::whole_row_on_host(const S* logits, std::size_t row) const {
  if constexpr (std::is_same_v<Real, S>) {
    const auto V = static_cast<std::size_t>(shape_.vocab_size);
    if (!bf16_logits_ && !tensor_.active() && exec_.space() == MemorySpace::host)
      return {logits + row * static_cast<std::size_t>(vocab_rows()), V};
  }
  whole_row_ = whole_logits_on_host(logits, 1, row);
  return whole_row_;
}

template <class Real, class S>
std::size_t Model<Real, S>::part_boundary_elements(int B, int T) const {
  const auto rows = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  const bool split = tensor_.active() && tensor_.sequence_parallel;
  return (split ? rows / static_cast<std::size_t>(tensor_.split.degree) : rows) * static_cast<std::size_t>(shape_.d_model);
}

template <class Real, class S>
std::vector<std::size_t> Model<Real, S>::forward_order() const {
  std::vector<std::size_t> order;
  for (std::size_t s = 0; s < layout_.segments().size(); ++s) order.push_back(s);
  return order;
}

template <class Real, class S>
std::vector<std::size_t> Model<Real, S>::backward_order() const {
  // The head's segments first (the embeddings' holds the LM head, used again at the very end
  // by the lookup where the part embeds), then the blocks from the last; a part that embeds
  // but does not end the model comes back to the embeddings last.
  const std::size_t blocks = static_cast<std::size_t>(part_.blocks(shape_));
  std::vector<std::size_t> order;
  if (part_.heads(shape_)) order = {0, final_norm_segment()};
  for (std::size_t l = blocks; l-- > 0;) order.push_back(block_segment(l));
  if (part_.embeds() && !part_.heads(shape_)) order.push_back(0);
  return order;
}

template <class Real, class S>
std::unique_ptr<Model<Real, S>> make_model(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute,
                                           TensorGroup tensor, ModelPart part) {
  const ArchSpec& arch = arch_spec(shape.arch);
  if constexpr (std::is_same_v<S, Bf16>) return arch.make_bf16(shape, max_batch, exec, recompute, tensor, part);
  else if constexpr (std::is_same_v<Real, float>) return arch.make_float(shape, max_batch, exec, recompute, tensor, part);
  else return arch.make_double(shape, max_batch, exec, recompute, tensor, part);
}

template <class Real, class S>
LayerKernels<Real, S>& layer_kernels_of(Exec& exec) {
  if constexpr (std::is_same_v<S, Bf16>) {
    LayerKernels<float, Bf16>* kernels = exec.bf16_layer_kernels();
    if (!kernels) throw Error("this backend (" + exec.description() + ") has no kernels with bf16 storage");
    return *kernels;
  } else if constexpr (std::is_same_v<Real, float>) {
    return exec.layer_kernels();
  } else {
    ST_REQUIRE(exec.space() == MemorySpace::host, "the double-precision model runs on the host only");
    static HostLayerKernels<Real> host;
    return host;
  }
}

template class Model<float>;
template class Model<double>;
template class Model<float, Bf16>;
template std::unique_ptr<Model<float>> make_model<float>(const ModelShape&, int, Exec&, Recompute, TensorGroup,
                                                         ModelPart);
template std::unique_ptr<Model<double>> make_model<double>(const ModelShape&, int, Exec&, Recompute, TensorGroup,
                                                           ModelPart);
template std::unique_ptr<Model<float, Bf16>> make_model<float, Bf16>(const ModelShape&, int, Exec&, Recompute,
                                                                     TensorGroup, ModelPart);
template LayerKernels<float>& layer_kernels_of<float>(Exec&);
template LayerKernels<double>& layer_kernels_of<double>(Exec&);
template LayerKernels<float, Bf16>& layer_kernels_of<float, Bf16>(Exec&);

}  // namespace st
