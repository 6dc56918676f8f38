#include "train/trainer.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/process_memory.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "deck/parse.hpp"
#include "exec/threads.hpp"
#include "optim/schedule.hpp"
#include "train/blas_kernel.hpp"
#include "train/evaluate.hpp"
#include "train/loss_watch.hpp"
#include "train/train_step.hpp"
#include "train/mfu.hpp"
#include "train/report.hpp"
#include "train/run_settings.hpp"
#include "train/run_start.hpp"
#include "train/sampler.hpp"
#include "weights/gpt2_weights.hpp"
#include "weights/init_from.hpp"

namespace st {

Trainer::Trainer(const Config& config, World& world, const DeviceChoice& device)
    : config_(config),
      world_(world),
      timeline_(config.run.trace_steps > 0) {
  // The device first: the model, the strategy and the communicators are built for it.
  std::unique_ptr<Execution> execution = make_execution(device, config.parallel);
  threads_ = choose_thread_count(static_cast<int>(config.run.threads), world.host_ranks());
  apply_thread_count(threads_);

  data_ = open_run_data(config, world.comm());
  // The batch is split between the data-parallel ranks: under tensor parallelism a tensor group's
  // ranks share one slice of it, a pipeline's stages each micro-batch (a degree the job cannot
  // split is refused here, naming it).
  deck_pipeline_degree(config, world.size());
  deck_tensor_degree(config, world.size(), world.local_size(), world.uniform());
  const int data_ranks = deck_data_ranks(config, world.size());
  batch_plan_ = plan_batches(config.data, config.model.seq_len, data_ranks, config.deck_path);

  // The yardstick for MFU, before the run's buffers: what it leaves resident (BLAS's own
  // buffers) is the libraries', not the run's. (So before the communicators too: its two
  // collectives are the only ones the hang watchdog does not watch.)
  yardstick_.emplace(MfuYardstick::measure(*execution, batch_plan_, config.model, config.parallel.precision == Precision::bf16,
                                           world.comm()));

  // What this rank holds before any of the run's buffers: the measured growth starts here.
  memory_.emplace();
  shape_ = model_shape(config.model);
  net_ = std::make_unique<ShardedModel>(config, world, std::move(execution), static_cast<int>(batch_plan_.micro_batch),
                                        &timeline_);

  const auto seed = static_cast<std::uint64_t>(config.run.seed);
  train_loader_ = std::make_unique<BatchLoader>(data_.splits.train, config.data.order, seed, kTrainStream,
                                                config.model.seq_len, batch_plan_.global_batch, "training");
  val_loader_ = std::make_unique<BatchLoader>(data_.splits.val, config.data.order, seed, kValStream, config.model.seq_len,
                                              batch_plan_.global_batch, "validation");
  tokens_.resize(static_cast<std::size_t>(batch_plan_.micro_batch * config.model.seq_len));
  targets_.resize(tokens_.size());

  checkpoint_dir_ = checkpoint_dir_of(config);
  const RunStart start = start_run(config, world, *net_, data_, *train_loader_, checkpoint_dir_);
  start_step_ = start.step;
  tokens_seen_ = start.tokens_seen;
  run_id_ = start.run_id;
  resume_notes_ = start.notes;
  // Where the run writes, after what it reads (a bad deck, data file or checkpoint is named
  // first) and before the first step: a stop signal writes a checkpoint whatever
  // checkpoint.every says, so a directory that cannot take one fails the run now, in seconds,
  // rather than losing the state at the time limit.
  require_run_directories(config, world.comm());
  checkpointer_ = std::make_unique<Checkpointer>(net_->agreements(), world.comm(), checkpoint_dir_,
                                                 static_cast<int>(config.checkpoint.keep), config.checkpoint.timeout_s,
                                                 config.checkpoint.async);
  signals_ = std::make_unique<StopSignals>();
  // A run that has finished already writes nothing: its directory stays as it was.
  finished_ = start_step_ > 0 && start_step_ >= config.run.steps;
  run_dir_ = std::make_unique<RunDirectory>(config, world.is_root() && !finished_, start_step_ > 0);
  if (!run_dir_->kept_note().empty()) resume_notes_.insert(resume_notes_.begin(), run_dir_->kept_note());

  blas_mismatch_ = blas_kernel_mismatch(world.comm());
  // The run's buffers are in place and set: the peak from here on is training's.
  memory_->buffers_ready();
}

Trainer::~Trainer() = default;

std::vector<std::pair<std::string, std::string>> Trainer::derived_settings() const {
  DerivedSettings built;
  built.world_size = world_.size();
  built.device = net_->execution().choice().note;
  built.batches = batch_plan_;
  built.parameters = net_->model().whole_layout().total();
  built.segments = net_->layout().segments().size();
  built.strategy = net_->strategy().description();
  built.strategy += tensor_split_note(net_->model().tensor_group().split.degree, net_->data_ranks());
  built.strategy += pipeline_note(config_, batch_plan_.accum_steps, batch_plan_.micro_batch);
  built.model_state = net_->strategy().memory();
  built.activations = net_->activation_bytes();
  built.recompute = net_->model().recompute();
  built.attention = describe_attention(net_->execution().choice().cuda, config_.parallel.precision,
                                       config_.parallel.attention, static_cast<int>(shape_.head_dim()));
  built.classifier = describe_classifier(net_->execution().choice().cuda, config_.parallel);
  built.bf16_activations = config_.parallel.stores_bf16_activations();
  built.data = describe_data(data_);
  built.sequential_data = config_.data.order == DataOrder::sequential;
  built.tokenizer = data_.tokenizer->description();
  built.run_directory = run_dir_->path();
  SettingsRows rows = derived_rows(built);
  const SettingsRows measured = {
      {"execution", net_->execution().exec().description()},
      {"collectives", net_->comms().description()},
      {"threads per rank", std::to_string(threads_)},
      {"padded vocabulary", std::to_string(shape_.padded_vocab)},
      {net_->execution().choice().cuda ? "measured GEMM rate" : "measured sgemm rate", yardstick_->description()},
      {"MFU against", yardstick_->yardstick_description()},
      {"BLAS", blas_description()},
  };
  rows.insert(rows.end(), measured.begin(), measured.end());
  return rows;
}

void Trainer::save_checkpoint(std::int64_t steps_done) {
  CheckpointInfo info;
  info.step = steps_done;
  info.tokens_seen = tokens_seen_;
  const LoaderPosition position = train_loader_->position();
  const TokenDataset& data = *data_.splits.train.data;
  const std::size_t next = train_loader_->next_start();
  const DataShard& shard = data.shards()[data.shard_of(next)];
  info.data_position = position.batches;
  info.data_order = name_of(config_.data.order);
  info.data_shard = shard.path;
  info.data_shard_offset = static_cast<std::int64_t>(next - shard.begin);
  info.data_epoch = position.epoch;
  info.seed = config_.run.seed;
  info.strategy = name_of(config_.parallel.strategy);
  info.precision = name_of(config_.parallel.precision);
  info.world_size = world_.size();
  info.shard_group = net_->shard_group();
  info.deck = config_.deck_text;
  info.settings = resolved_deck_text(config_);
  info.run_id = run_id_;
  info.created_by = std::string("shardtrain ") + ST_VERSION + " on " + world_.host();
  info.shape = shape_;
  for (const auto& done : checkpointer_->save(info, net_->model().whole_layout(), net_->strategy())) report_checkpoint(done);
}

void Trainer::report_checkpoint(const Checkpointer::Done& done) {
  // What the writer says the file holds (ckpt/write.hpp checkpoint_state_bytes), not a size
  // restated here.
  const double bytes = static_cast<double>(done.bytes);
  char line[512];
  std::snprintf(line, sizeof line, "checkpoint %s: %s in %.2f s (%.0f MB/s); training waited %.2f s", done.path.c_str(),
                format_bytes(bytes).c_str(), done.seconds, bytes / done.seconds / 1e6, done.stall_seconds);
  say(line);
  // SHARDTRAIN_CKPT_TIMING=1: where the write's time went (metrics.jsonl always has it).
  if (const char* timing = std::getenv("SHARDTRAIN_CKPT_TIMING"); timing && std::string(timing) == "1") {
    std::snprintf(line, sizeof line, "checkpoint phases (rank 0): copy %.3f s (of the stall); ", done.copy_seconds);
    say(line + done.phases.text());
  }
  if (world_.is_root())
    run_dir_->metric({{"kind", "checkpoint"},
                      {"step", done.step},
                      {"path", done.path},
                      {"bytes", static_cast<std::uint64_t>(bytes)},
                      {"seconds", done.seconds},
                      {"stall_seconds", done.stall_seconds},
                      {"copy_seconds", done.copy_seconds},
                      {"phases", done.phases.json()}});
  // Another run's checkpoints in this directory are kept, and named once.
  for (const std::string& moved : done.set_aside) say("checkpoint: " + moved);
  std::vector<std::string> unseen;
  for (const std::string& file : done.left_alone)
    if (left_alone_said_.insert(file).second) unseen.push_back(file);
  if (!unseen.empty())
    say("checkpoint.keep applies to this run's checkpoints only; left alone in " + checkpoint_dir_ + ": " +
        join(unseen, ", "));
}

void Trainer::say(const std::string& line) {
  if (!world_.is_root()) return;
  std::cout << line << std::endl;
  run_dir_->log(line);
}

double Trainer::train_step(std::int64_t step) {
  const std::int64_t first = batch_plan_.first_sequence(net_->data_rank());
  train_loader_->next_batch();
  StepSettings settings;
  settings.micro_batches = batch_plan_.accum_steps;
  settings.micro_batch = static_cast<int>(batch_plan_.micro_batch);
  settings.seq_len = static_cast<int>(batch_plan_.seq_len);
  settings.data_ranks = static_cast<int>(batch_plan_.ranks);
  settings.lr = learning_rate(config_.optimizer, step, config_.run.steps);
  settings.grad_clip = config_.optimizer.grad_clip;
  settings.step = step + 1;
  auto fill = [&](std::int64_t micro) {
    train_loader_->fill(first + micro * batch_plan_.micro_batch, batch_plan_.micro_batch, tokens_.data(), targets_.data());
  };
  // A loss or gradient that is not a number would make every weight NaN: the update is skipped
  // and the run stops after this step (run()).
  const StepOutcome outcome = st::train_step(*net_, settings, fill, tokens_.data(), targets_.data(), &timeline_);
  last_grad_norm_ = outcome.grad_norm;
  last_lr_ = settings.lr;
  return outcome.loss;
}

double Trainer::validation_loss() {
  return mean_loss(*net_, *val_loader_, batch_plan_, net_->data_rank(), config_.run.eval_batches);
}

void Trainer::print_sample(std::int64_t step) {
  // Every rank generates (a sharded strategy gathers segments collectively); rank 0 prints.
  if (config_.run.sample_tokens == 0) return;
  if (net_->pipeline()) {
    // Decoding runs the whole model on a rank, and a pipeline's stages hold it in parts.
    say("no sample after step " + std::to_string(step) + ": a pipeline's stages hold the model in parts; `shardtrain "
        "generate " + run_dir_->path() + "` samples from the run's checkpoint");
    return;
  }
  std::vector<int> context;
  if (data_.text_samples) {
    context = data_.tokenizer->encode(config_.run.sample_prompt);
    if (context.empty()) context.push_back(data_.tokenizer->document_start());
  } else {
    context.push_back((*data_.splits.val.data)[data_.splits.val.begin]);  // a token that occurs in the data
  }
  const std::size_t prompt = context.size();
  const auto tokens = generate(net_->model(), net_->strategy(), context, static_cast<int>(config_.run.sample_tokens),
                               {config_.run.sample_temperature, 0, static_cast<std::uint64_t>(config_.run.seed) + step});
  net_->strategy().settle();  // no group collective in flight beside the world's (hsdp on NCCL)
  if (!world_.is_root()) return;
  say("---- sample after step " + std::to_string(step) + " ----");
  const std::string text = data_.text_samples ? render_text(tokens, *data_.tokenizer) : render_ids(tokens);
  say(text);
  say("----");
  run_dir_->metric({{"kind", "sample"}, {"step", step}, {"prompt_tokens", prompt}, {"text", text}});
}

TrainSummary Trainer::run() {
  if (finished_) {
    for (const std::string& note : resume_notes_) say(note);
    say("the run has finished: the checkpoint is at step " + std::to_string(start_step_) + " and run.steps = " +
        std::to_string(config_.run.steps) + "; nothing to train, nothing written (raise run.steps to train further)");
    TrainSummary summary;
    summary.steps = start_step_;
    return summary;
  }
  say(settings_table(config_, derived_settings()));
  for (const std::string& warning : schedule_warnings(config_.optimizer, config_.run.steps)) say("warning: " + warning);
  if (!blas_mismatch_.empty()) say("warning: " + blas_mismatch_);
  if (world_.is_root())
    run_dir_->metric({{"kind", "run"},
                      {"parameters", net_->model().whole_layout().total()},
                      {"world_size", world_.size()},
                      {"nodes", world_.node_count()},
                      {"strategy", name_of(config_.parallel.strategy)},
                      {"precision", name_of(config_.parallel.precision)},
                      {"tokens_per_step", batch_plan_.global_batch * batch_plan_.seq_len}});
  TrainSummary summary;
  summary.val_unigram_entropy = data_.splits.val.data->unigram_entropy(data_.splits.val.begin, data_.splits.val.end);
  {
    std::ostringstream os;
    os.precision(4);
    os << std::fixed << "reference: ln(vocab_size) = " << std::log(static_cast<double>(shape_.vocab_size))
       << ", unigram entropy of the validation text = " << summary.val_unigram_entropy << " nats";
    say(os.str());
  }
  // Per rank: a tensor group's ranks share their data-parallel rank's FLOPs. Counted as llm.c
  // counts them (mfu_flops_per_token: every parameter, causal attention's half of the scores),
  // whichever attention runs, so that MFU compares with llm.c's and between the two attentions.
  const double flops_per_step =
      mfu_flops_per_token(shape_, batch_plan_.seq_len) * static_cast<double>(batch_plan_.global_batch * batch_plan_.seq_len) /
      static_cast<double>(world_.size());
  for (const std::string& note : resume_notes_) say(note);
  say(memory_line("at start"));

  const Stopwatch run_clock;  // for elapsed time and the ETA
  for (std::int64_t step = start_step_; step < config_.run.steps; ++step) {
    timeline_.set_enabled(step < config_.run.trace_steps);
    // The step's own communication: what evaluations, samples and checkpoints send between steps
    // is not counted in it.
    const ShardedModel::CommTotals before = net_->comm_totals();
    const LoaderPosition batch_of_step = train_loader_->position();
    Stopwatch clock;
    const double loss = train_step(step);
    const double seconds = clock.seconds();
    const LossWatch::Verdict verdict = loss_watch_.observe(loss, last_grad_norm_);
    if (verdict.finite) tokens_seen_ += batch_plan_.global_batch * batch_plan_.seq_len;
    const ShardedModel::CommTotals after = net_->comm_totals();
    const MemoryReport memory = net_->strategy().memory();

    StepRecord record{step + 1, config_.run.steps, loss, last_lr_, last_grad_norm_, seconds,
                      static_cast<double>(batch_plan_.global_batch * batch_plan_.seq_len) / seconds,
                      yardstick_->mfu(flops_per_step / seconds), after.waited_seconds - before.waited_seconds,
                      memory.model_state() + memory.workspace + net_->activation_bytes(),
                      after.traffic.intra.total() - before.traffic.intra.total(),
                      after.traffic.inter.total() - before.traffic.inter.total()};
    record.comm_tensor_bytes = after.tensor_bytes - before.tensor_bytes;
    record.comm_pipeline_bytes = after.pipeline_bytes - before.pipeline_bytes;
    record.mfu_of_measured_gemm = yardstick_->of_measured(flops_per_step / seconds);
    record.tokens_seen = tokens_seen_;
    record.peak_bytes = measured_peak();
    record.elapsed_seconds = run_clock.seconds();
    record.eta_seconds = record.elapsed_seconds / static_cast<double>(step + 1 - start_step_) *
                         static_cast<double>(config_.run.steps - step - 1);
    if (step == start_step_) summary.first_loss = loss;
    summary.last_loss = loss;
    summary.steps = step + 1;
    if (world_.is_root()) {
      nlohmann::ordered_json row = step_metrics(record);
      if (!verdict.finite) row["diverged"] = true;
      if (verdict.spike_ratio > 0) row["loss_spike"] = verdict.spike_ratio;
      run_dir_->metric(row);
    }
    // The same on every rank (the verdict is on sums over the ranks): the line's peak is collective.
    if ((step + 1) % config_.run.log_every == 0 || step == 0 || step + 1 == config_.run.steps ||
        !verdict.warning.empty()) {
      record.largest_peak_bytes = net_->agreements().max_over_ranks(record.peak_bytes, "world (memory)");
      const Execution& execution = net_->execution();
      // On a GPU the peak is what the whole device has in use (every rank sharing it included), so
      // the share is of the whole device.
      const std::uint64_t per_rank = execution.choice().cuda
                                         ? execution.device_total_bytes()
                                         : node_memory_bytes() / static_cast<std::uint64_t>(world_.host_ranks());
      record.peak_share = per_rank > 0 ? static_cast<double>(record.largest_peak_bytes) / static_cast<double>(per_rank) : 0;
      say(step_line(record));
    }
    if (const std::string note = yardstick_->note_for(record.mfu); !note.empty()) say(note);
    if (verdict.spike_ratio > 0) say("warning: step " + std::to_string(step + 1) + ": " + verdict.warning);
    if (!verdict.finite) {
      // The state before this step is the last good one: kept with the position of this step's
      // batch, so a resume (with a lower optimizer.lr, say) takes this step again.
      say("error: step " + std::to_string(step + 1) + ": " + verdict.warning + "; the update was skipped");
      train_loader_->seek(batch_of_step);
      save_checkpoint(step);
      say("the run diverged: the checkpoint of step " + std::to_string(step) + " holds the last finite weights; lower "
          "optimizer.lr or set optimizer.grad_clip and resume with checkpoint.resume = \"latest\" (exit code " +
          std::to_string(kExitDiverged) + ")");
      summary.diverged = true;
      summary.steps = step;
      break;
    }

    const bool last = step + 1 == config_.run.steps;
    if (last || (config_.run.eval_every > 0 && (step + 1) % config_.run.eval_every == 0)) {
      summary.last_val_loss = validation_loss();
      char line[128];
      std::snprintf(line, sizeof line, "val loss %.4f at step %lld", summary.last_val_loss,
                    static_cast<long long>(step + 1));
      say(line);
      if (world_.is_root())
        run_dir_->metric({{"kind", "val"}, {"step", step + 1}, {"val_loss", summary.last_val_loss}});
    }
    if (last || (config_.run.sample_every > 0 && (step + 1) % config_.run.sample_every == 0)) print_sample(step + 1);
    // Memory after the first step (the workspace has reached its size), at each evaluation, at the end.
    const bool evaluated = config_.run.eval_every > 0 && (step + 1) % config_.run.eval_every == 0;
    if (step == start_step_ || last || evaluated) say(memory_line("after step " + std::to_string(step + 1)));

    if (config_.checkpoint.async)  // the same on every rank: poll() is collective
      if (auto done = checkpointer_->poll()) report_checkpoint(*done);
    // A stop signal on any rank stops every rank after this step, with a checkpoint.
    int stop = signals_->received();
    stop = net_->agreements().max_over_ranks(stop, "world (stop signals)");
    const std::int64_t every = config_.checkpoint.every;
    const bool periodic = every > 0 && (step + 1) % every == 0;
    if (stop != 0 || periodic || (last && config_.checkpoint.at_end)) save_checkpoint(step + 1);
    if (stop != 0) {
      say("stopped by " + StopSignals::name(stop) + " after step " + std::to_string(step + 1) +
          " with a checkpoint; resume with checkpoint.resume = \"latest\" (exit code " + std::to_string(kExitStopped) +
          ")");
      summary.stop_signal = stop;
      break;
    }
  }
  if (auto done = checkpointer_->finish()) report_checkpoint(*done);
  if (summary.steps == config_.run.steps && config_.run.export_at_end == ExportAtEnd::safetensors) export_model();
  timeline_.set_enabled(false);
  write_traces();
  return summary;
}

void Trainer::export_model() {
  // The whole model, gathered from every rank's slices and shards (collective), in Hugging Face's
  // layout beside the run's other files: what `ckpt export --format safetensors` writes from the
  // final checkpoint, without reading it back.
  const std::vector<float> full = net_->whole_params();
  const std::string dir = run_dir_->path() + "/model";
  agreed(world_.comm(), [&] {
    if (!world_.is_root()) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("run.export_at_end: cannot create " + dir + ": " + ec.message());
    const Stopwatch clock;
    const std::string path = dir + "/model.safetensors";
    write_weights(WeightsFormat::safetensors, path, shape_, full, WeightDtype::fp32);
    const auto files = weights_outputs(WeightsFormat::safetensors, path, shape_, WeightDtype::fp32);
    say("exported the trained model (step " + std::to_string(config_.run.steps) + ", fp32, Hugging Face's layout: " +
        std::to_string(files.size()) + " files) to " + dir + "/ in " + format_fixed(clock.seconds(), 2) + " s" +
        " (run.export_at_end)");
  });
}

std::uint64_t Trainer::measured_peak() const {
  const Execution& execution = net_->execution();
  return execution.choice().cuda ? execution.device_used_bytes() : peak_resident_bytes();
}

std::string Trainer::memory_line(const std::string& when) {
  return memory_->line(when, *net_, checkpointer_->copy_bytes(), world_.is_root() ? run_dir_.get() : nullptr);
}

void Trainer::write_traces() {
  // Steps start_step_ + 1 to last were traced (run.trace_steps counts from the run's step 0).
  const std::int64_t last = std::min(config_.run.trace_steps, config_.run.steps);
  if (last <= start_step_) return;
  // Every rank writes its own file; the directory's name is the same on every rank. A resumed
  // run's timeline goes beside the first run's, named by its first step, never over it.
  const std::string& dir = run_dir_->path();
  const std::string name = start_step_ == 0 ? ".json" : ".from_step" + std::to_string(start_step_ + 1) + ".json";
  const std::string path = dir + "/trace.rank" + std::to_string(world_.rank()) + name;
  std::ofstream out(path);
  out << timeline_.json(world_.rank());
  out.close();
  if (!out) throw Error("cannot write the timeline to " + path + ": " + std::strerror(errno));
  say("timeline of steps " + std::to_string(start_step_ + 1) + " to " + std::to_string(last) + ": " + dir +
      "/trace.rank<R>" + name + " (open in https://ui.perfetto.dev or chrome://tracing)");
}

void Trainer::save_params(const std::string& path) {
  const std::vector<float> full = net_->whole_params();
  if (!world_.is_root()) return;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(full.data()), static_cast<std::streamsize>(full.size() * sizeof(float)));
  out.close();
  if (!out) throw Error("cannot write parameters to " + path + ": " + std::strerror(errno));
}

}  // namespace st
