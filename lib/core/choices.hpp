#pragma once
// The deck's choices as enums, parsed once when the deck is read (deck/schema.cpp):
// code compares enums, never strings, and a new value is one line in its table. Here in core,
// since the deck's Config holds them and the communicators, the strategies, the planner, the
// model and the tokenizers all speak them. Each value keeps the word the
// deck spells it with (name_of), for messages, checkpoints and the run's records.
#include <array>
#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace st {

// parallel.strategy. fsdp is zero3 by another name (kept, so messages use the user's word);
// automatic is "auto", resolved by the planner before anything is built.
enum class StrategyKind { ddp, zero1, zero2, zero3, fsdp, hsdp, automatic };
// parallel.precision
enum class Precision { fp32, bf16 };
// parallel.collectives
enum class Collectives { automatic, flat, two_level };
// parallel.intra_node
enum class IntraNode { shm, mpi };
// parallel.attention: automatic ("auto") is flash attention where it runs (a GPU, bf16, a head
// width it has kernels for: exec/attention_probs.hpp), exact the T x T path everywhere.
enum class AttentionChoice { automatic, exact };
// parallel.classifier: automatic ("auto") is the fused classifier where it runs (a GPU in bf16:
// LayerKernels::fused_classifier), unfused the fp32 logits and separate kernels everywhere.
enum class ClassifierChoice { automatic, unfused };
// parallel.activations: what activations (and their gradients) are stored in. automatic ("auto")
// is fp32 (no device kernel stores bf16 yet), fp32 fp32, bf16 bf16 beside bf16 parameters and fp32
// gradients (Model<float, Bf16>; on the CPU the host's reference kernels, exec/host_bf16_kernels.hpp).
enum class ActivationStorage { automatic, fp32, bf16 };
// parallel.grad_reduction, for the strategies that shard gradients (zero2, zero3, hsdp) when a
// step accumulates several micro-batches: micro_batch ("every_micro_batch") reduce-scatters each
// micro-batch's gradients into the sharded gradient as its backward finishes them, so no rank
// holds a whole-model gradient (FSDP's and DeepSpeed's way); step ("once") accumulates them
// whole and reduces once (fewer bytes, a whole-model fp32 gradient more per rank); automatic
// ("auto") is once where that fits in the rank's memory, else every micro-batch (plan/fit).
enum class GradReduction { automatic, micro_batch, step };
// parallel.device: where each rank computes; automatic ("auto") is cuda where this build has CUDA
// and every rank has a GPU of its own, else cpu (runtime/device_choice.hpp).
enum class DeviceKind { automatic, cpu, cuda };
// data.format: how data files are read; automatic ("auto") is a token file where the file starts
// with a token file's magic, else text (data/dataset.hpp).
enum class DataFormat { automatic, text, tokens };
// data.tokenizer_pattern: the pre-tokenizer pattern of an hf or tiktoken tokenizer; automatic
// ("auto") is the file's own (tokenizer/tokenizer_files.hpp).
enum class TokenizerPattern { automatic, gpt2, cl100k };


template <class E>
struct ChoiceNames;  // static constexpr std::array<std::pair<E, const char*>, N> table
template <>
struct ChoiceNames<StrategyKind> {
  static constexpr std::array<std::pair<StrategyKind, const char*>, 7> table{
      {{StrategyKind::ddp, "ddp"},
       {StrategyKind::zero1, "zero1"},
       {StrategyKind::zero2, "zero2"},
       {StrategyKind::zero3, "zero3"},
       {StrategyKind::fsdp, "fsdp"},
       {StrategyKind::hsdp, "hsdp"},
       {StrategyKind::automatic, "auto"}}};
};
template <>
struct ChoiceNames<Precision> {
  static constexpr std::array<std::pair<Precision, const char*>, 2> table{
      {{Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}}};
};
template <>
struct ChoiceNames<Collectives> {
  static constexpr std::array<std::pair<Collectives, const char*>, 3> table{
      {{Collectives::automatic, "auto"}, {Collectives::flat, "flat"}, {Collectives::two_level, "two_level"}}};
};
template <>
struct ChoiceNames<IntraNode> {
  static constexpr std::array<std::pair<IntraNode, const char*>, 2> table{
      {{IntraNode::shm, "shm"}, {IntraNode::mpi, "mpi"}}};
};
template <>
struct ChoiceNames<AttentionChoice> {
  static constexpr std::array<std::pair<AttentionChoice, const char*>, 2> table{
      {{AttentionChoice::automatic, "auto"}, {AttentionChoice::exact, "exact"}}};
};
template <>
struct ChoiceNames<ClassifierChoice> {
  static constexpr std::array<std::pair<ClassifierChoice, const char*>, 2> table{
      {{ClassifierChoice::automatic, "auto"}, {ClassifierChoice::unfused, "unfused"}}};
};
template <>
struct ChoiceNames<ActivationStorage> {
  static constexpr std::array<std::pair<ActivationStorage, const char*>, 3> table{
      {{ActivationStorage::automatic, "auto"}, {ActivationStorage::fp32, "fp32"}, {ActivationStorage::bf16, "bf16"}}};
};

// parallel.pipeline_schedule: the order of the micro-batches' passes through the pipeline's
// stages (parallel/pipeline_schedule.hpp): gpipe every forward then every backward; one_f_one_b
// ("1f1b") PipeDream-Flush's one forward, one backward; interleaved Megatron's 1F1B over
// parallel.virtual_stages model chunks per rank.
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };
template <>
struct ChoiceNames<PipelineSchedule> {
  static constexpr std::array<std::pair<PipelineSchedule, const char*>, 3> table{
      {{PipelineSchedule::gpipe, "gpipe"}, {PipelineSchedule::one_f_one_b, "1f1b"},
       {PipelineSchedule::interleaved, "interleaved"}}};
};

template <>
struct ChoiceNames<GradReduction> {
  static constexpr std::array<std::pair<GradReduction, const char*>, 3> table{
      {{GradReduction::automatic, "auto"}, {GradReduction::micro_batch, "every_micro_batch"}, {GradReduction::step, "once"}}};
};
template <>
struct ChoiceNames<DeviceKind> {
  static constexpr std::array<std::pair<DeviceKind, const char*>, 3> table{
      {{DeviceKind::automatic, "auto"}, {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}}};
};
template <>
struct ChoiceNames<DataFormat> {
  static constexpr std::array<std::pair<DataFormat, const char*>, 3> table{
      {{DataFormat::automatic, "auto"}, {DataFormat::text, "text"}, {DataFormat::tokens, "tokens"}}};
};
template <>
struct ChoiceNames<TokenizerPattern> {
  static constexpr std::array<std::pair<TokenizerPattern, const char*>, 3> table{
      {{TokenizerPattern::automatic, "auto"}, {TokenizerPattern::gpt2, "gpt2"}, {TokenizerPattern::cl100k, "cl100k"}}};
};

// The deck's other choices. Their words are their enumerators' names in order: each enum's
// choice_words lists them, and one ChoiceNames serves them all.
template <class E, std::size_t N>
constexpr std::array<std::pair<E, const char*>, N> words_in_order(const char* const (&words)[N]) {
  std::array<std::pair<E, const char*>, N> table{};
  for (std::size_t i = 0; i < N; ++i) table[i] = {static_cast<E>(i), words[i]};
  return table;
}

// model.arch: the model family, whose row in the architecture table (model/arch.hpp) says what
// differs between families.
//   gpt2   learned positions, LayerNorm with biases, a 4x GELU MLP, multi-head attention, biases
//          everywhere, the LM head tied to the token embedding;
//   llama  rotary positions (Hugging Face's rotate-half layout), RMSNorm, a SwiGLU MLP,
//          grouped-query attention, no biases, the LM head tied or not.
enum class Arch { gpt2, llama };
constexpr auto choice_words(Arch) { return words_in_order<Arch>({"gpt2", "llama"}); }
// model.rope_scaling: how a Llama's rotary frequencies are rescaled for a longer context (Hugging
// Face's rope_scaling): none, or Llama 3.1's llama3 (model/rope.hpp: long wavelengths divided by
// the factor, short ones kept, a smooth blend between).
enum class RopeScaling { none, llama3 };
constexpr auto choice_words(RopeScaling) { return words_in_order<RopeScaling>({"none", "llama3"}); }
// model.recompute: the activations recomputed in backward rather than kept (model/activations.hpp
// says what each keeps).
enum class Recompute { none, selective, full };
constexpr auto choice_words(Recompute) { return words_in_order<Recompute>({"none", "selective", "full"}); }
// data.order: training batches drawn at random from the seed, or read on in order (llm.c's way).
enum class DataOrder { random, sequential };
constexpr auto choice_words(DataOrder) { return words_in_order<DataOrder>({"random", "sequential"}); }
// optimizer.schedule: the learning rate's decay after warmup (optim/schedule.hpp).
enum class LrSchedule { cosine, linear, constant };
constexpr auto choice_words(LrSchedule) { return words_in_order<LrSchedule>({"cosine", "linear", "constant"}); }
// data.tokenizer: how text becomes tokens (tokenizer/tokenizer.hpp make_tokenizer).
enum class TokenizerKind { byte, gpt2, hf, tiktoken };
constexpr auto choice_words(TokenizerKind) {
  return words_in_order<TokenizerKind>({"byte", "gpt2", "hf", "tiktoken"});
}
// run.export_at_end: what the run writes for other tools after its last step (none, or Hugging
// Face's safetensors layout).
enum class ExportAtEnd { none, safetensors };
constexpr auto choice_words(ExportAtEnd) { return words_in_order<ExportAtEnd>({"none", "safetensors"}); }

template <class E>
  requires requires { choice_words(E{}); }
struct ChoiceNames<E> {
  static constexpr auto table = choice_words(E{});
};

// The deck's word for a value.
template <class E>
std::string name_of(E value) {
  for (const auto& [v, name] : ChoiceNames<E>::table)
    if (v == value) return name;
  return "?";
}
// The value a word names, or none.
template <class E>
std::optional<E> choice_from_name(std::string_view word) {
  for (const auto& [v, name] : ChoiceNames<E>::table)
    if (word == name) return v;
  return std::nullopt;
}
// Every word, in the table's order (the schema's list of allowed values).
template <class E>
std::vector<std::string> choice_names() {
  std::vector<std::string> names;
  for (const auto& entry : ChoiceNames<E>::table) names.emplace_back(entry.second);
  return names;
}

// Writes the deck's word (for messages built with streams).
template <class E, class = decltype(ChoiceNames<E>::table)>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << name_of(value);
}

// How much of the model state a strategy shards: 0 (ddp) .. 3 (zero3, fsdp, hsdp).
int zero_stage(StrategyKind strategy);

}  // namespace st
