#include "model/model.hpp"

#include <algorithm>
#include <type_traits>

#include "core/error.hpp"
#include "exec/layer_kernels.hpp"
#include "model/gpt2.hpp"
#include "model/llama.hpp"

namespace st {

template <class Real>
Model<Real>::Model(const ModelShape& shape, Exec& exec, Recompute recompute, TensorGroup tensor)
    : shape_(shape),
      tensor_(tensor),
      layout_(make_layout(shape, tensor.split)),
      whole_layout_(make_layout(shape)),
      exec_(exec),
      recompute_(recompute),
      kernels_(layer_kernels_of<Real>(exec)) {
  ST_REQUIRE(!tensor.active() || (tensor.comm && tensor.comm->size() == tensor.split.degree &&
                                  tensor.comm->rank() == tensor.split.rank),
             "a tensor-parallel model needs its group's communicator");
}

template <class Real>
std::vector<Real> Model<Real>::slice_of(std::span<const Real> whole) const {
  ST_REQUIRE(whole.size() == whole_layout_.total(), "whole parameters do not match the model's layout");
  std::vector<Real> slice(layout_.total());
  for_each_slice_run(whole_layout_, layout_, tensor_.split, [&](std::size_t w, std::size_t s, std::size_t n) {
    std::copy(whole.begin() + static_cast<std::ptrdiff_t>(w), whole.begin() + static_cast<std::ptrdiff_t>(w + n),
              slice.begin() + static_cast<std::ptrdiff_t>(s));
  });
  return slice;
}

template <class Real>
std::vector<Real> Model<Real>::whole_from_slices(std::span<const Real> slice) const {
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
  std::vector<Real> whole(whole_layout_.total());
  for (std::size_t r = 0; r < degree; ++r)
    for_each_slice_run(whole_layout_, layout_, TensorSplit{tensor_.split.degree, static_cast<int>(r)},
                       [&](std::size_t w, std::size_t s, std::size_t count_here) {
                         std::copy_n(slices.data() + r * n + s, count_here, whole.data() + w);
                       });
  return whole;
}

template <class Real>
int Model<Real>::vocab_real() const {
  const int real = static_cast<int>(shape_.vocab_size) - vocab_first();
  return std::clamp(real, 0, vocab_rows());
}

template <class Real>
void Model<Real>::upload_slice_tokens(int* to, const int* tokens, int count) {
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

template <class Real>
void Model<Real>::sum_over_tensor_group(Real* data, std::size_t count) {
  if (!tensor_.active()) return;
  tensor_.comm->all_reduce(Buffer::of(std::span<Real>(data, count), exec_.before_communication()), ReduceOp::sum);
}

template <class Real>
const Real* Model<Real>::gather_rows(const Real* local, Real* whole, std::size_t rows, std::size_t width) {
  if (!rows_split_) return local;
  const std::size_t mine = rows / static_cast<std::size_t>(tensor_.split.degree) * width;
  tensor_.comm->all_gather(
      Buffer::of(std::span<Real>(const_cast<Real*>(local), mine), exec_.before_communication()),
      Buffer::of(std::span<Real>(whole, rows * width)));
  return whole;
}

template <class Real>
Real* Model<Real>::sum_rows(Real* whole, Real* local, std::size_t rows, std::size_t width) {
  if (!rows_split_) {
    sum_over_tensor_group(whole, rows * width);
    return whole;
  }
  const std::size_t mine = rows / static_cast<std::size_t>(tensor_.split.degree) * width;
  tensor_.comm->reduce_scatter(Buffer::of(std::span<Real>(whole, rows * width), exec_.before_communication()),
                               Buffer::of(std::span<Real>(local, mine)), ReduceOp::sum);
  return local;
}

template <class Real>
void Model<Real>::add_split_row_gradients(Real* G, std::initializer_list<std::size_t> offsets, Real* scratch,
                                          std::size_t width) {
  if (!rows_split_) return;
  sum_over_tensor_group(scratch, offsets.size() * width);
  std::size_t i = 0;
  for (const std::size_t at : offsets) kernels_.add(G + at, G + at, scratch + width * i++, width);
}

template <class Real>
double Model<Real>::cross_entropy(Real* logits, Real* losses, const int* targets, int rows, Real* scratch) {
  const int V = static_cast<int>(shape_.vocab_size), Vp = static_cast<int>(shape_.padded_vocab);
  if (!tensor_.active()) return kernels_.softmax_cross_entropy_forward(logits, losses, targets, rows, V, Vp);
  // Megatron's vocabulary-parallel cross-entropy: three numbers per row and slice cross the
  // group instead of the logits.
  const auto n = static_cast<std::size_t>(rows);
  const int degree = tensor_.split.degree;
  Real* stats = scratch;
  Real* gathered = stats + 3 * n;
  Real* row_stats = gathered + 3 * n * static_cast<std::size_t>(degree);
  kernels_.logit_slice_stats(logits, targets, stats, rows, vocab_real(), vocab_rows(), vocab_first());
  tensor_.comm->all_gather(Buffer::of(std::span<Real>(stats, 3 * n), exec_.before_communication()),
                           Buffer::of(std::span<Real>(gathered, 3 * n * static_cast<std::size_t>(degree))));
  const double total = kernels_.logit_slices_combine(gathered, row_stats, losses, targets, rows, degree);
  kernels_.logit_slice_softmax(logits, row_stats, rows, vocab_real(), vocab_rows());
  return total;
}

template <class Real>
void Model<Real>::cross_entropy_backward(Real* probs, const int* targets, int rows, Real scale) {
  if (!tensor_.active()) {
    kernels_.softmax_cross_entropy_backward(probs, targets, rows, static_cast<int>(shape_.vocab_size),
                                            static_cast<int>(shape_.padded_vocab), scale);
    return;
  }
  kernels_.logit_slice_backward(probs, targets, rows, vocab_real(), vocab_rows(), vocab_first(), scale);
}

template <class Real>
std::vector<Real> Model<Real>::whole_logits_on_host(const Real* logits, std::size_t rows) const {
  const auto V = static_cast<std::size_t>(shape_.vocab_size), Vp = static_cast<std::size_t>(shape_.padded_vocab);
  std::vector<Real> out(rows * V);
  if (!tensor_.active()) {
    for (std::size_t r = 0; r < rows; ++r) exec_.download(out.data() + r * V, logits + r * Vp, V * sizeof(Real));
    return out;
  }
  // Every rank's slice of every row, one rank after another; then each row put back together.
  const auto slice = static_cast<std::size_t>(vocab_rows()), degree = static_cast<std::size_t>(tensor_.split.degree);
  const std::size_t count = degree * rows * slice;
  if (gather_memory_.bytes() < count * sizeof(Real)) gather_memory_ = exec_.allocate(count * sizeof(Real));
  Real* at = gather_memory_.as<Real>().data();
  tensor_.comm->all_gather(
      Buffer::of(std::span<Real>(const_cast<Real*>(logits), rows * slice), exec_.before_communication()),
      Buffer::of(std::span<Real>(at, count)));
  std::vector<Real> parts(count);
  exec_.download(parts.data(), at, count * sizeof(Real));
  for (std::size_t p = 0; p < degree; ++p)
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t first = p * slice;  // the slice's first column in the whole row
      if (first >= V) continue;
      std::copy_n(parts.data() + (p * rows + r) * slice, std::min(slice, V - first), out.data() + r * V + first);
    }
  return out;
}

template <class Real>
std::span<const Real> Model<Real>::whole_row_on_host(const Real* row) const {
  const auto V = static_cast<std::size_t>(shape_.vocab_size);
  if (!tensor_.active() && exec_.space() == MemorySpace::host) return {row, V};
  whole_row_ = whole_logits_on_host(row, 1);
  return whole_row_;
}

template <class Real>
std::vector<std::size_t> Model<Real>::forward_order() const {
  std::vector<std::size_t> order;
  for (std::size_t s = 0; s < layout_.segments().size(); ++s) order.push_back(s);
  return order;
}

template <class Real>
std::vector<std::size_t> Model<Real>::backward_order() const {
  const std::size_t last = layout_.segments().size() - 1;
  std::vector<std::size_t> order{0, last};
  for (std::size_t s = last - 1; s >= 1; --s) order.push_back(s);
  return order;
}

template <class Real>
std::unique_ptr<Model<Real>> make_model(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute,
                                        TensorGroup tensor) {
  if (shape.arch == Arch::llama) return std::make_unique<Llama<Real>>(shape, max_batch, exec, recompute, tensor);
  return std::make_unique<Gpt2<Real>>(shape, max_batch, exec, recompute, tensor);
}

template <class Real>
LayerKernels<Real>& layer_kernels_of(Exec& exec) {
  if constexpr (std::is_same_v<Real, float>) {
    return exec.layer_kernels();
  } else {
    ST_REQUIRE(exec.space() == MemorySpace::host, "the double-precision model runs on the host only");
    static HostLayerKernels<Real> host;
    return host;
  }
}

template class Model<float>;
template class Model<double>;
template std::unique_ptr<Model<float>> make_model<float>(const ModelShape&, int, Exec&, Recompute, TensorGroup);
template std::unique_ptr<Model<double>> make_model<double>(const ModelShape&, int, Exec&, Recompute, TensorGroup);
template LayerKernels<float>& layer_kernels_of<float>(Exec&);
template LayerKernels<double>& layer_kernels_of<double>(Exec&);

}  // namespace st
