#include "model/model.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "exec/layer_kernels.hpp"
#include "model/gpt2.hpp"
#include "model/llama.hpp"

namespace st {

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
std::unique_ptr<Model<Real>> make_model(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute) {
  if (shape.arch == Arch::llama) return std::make_unique<Llama<Real>>(shape, max_batch, exec, recompute);
  return std::make_unique<Gpt2<Real>>(shape, max_batch, exec, recompute);
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
template std::unique_ptr<Model<float>> make_model<float>(const ModelShape&, int, Exec&, Recompute);
template std::unique_ptr<Model<double>> make_model<double>(const ModelShape&, int, Exec&, Recompute);
template LayerKernels<float>& layer_kernels_of<float>(Exec&);
template LayerKernels<double>& layer_kernels_of<double>(Exec&);

}  // namespace st
