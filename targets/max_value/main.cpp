// max_value — SPEC Example 1 with stformer's own training loop.
//
//   max_value train   --model pointer|set [--seed S] [--iterations I] [--lr LR] [--fresh]
//                     [--checkpoint PATH] [--save-every I]
//   max_value train   --resume PATH [--checkpoint PATH] [--save-every I]
//   max_value eval    --checkpoint PATH [--seed S] [--sets 1000]
//   max_value predict --checkpoint PATH --input IN.safetensors --output OUT.safetensors
//   max_value plot    --checkpoint PATH [--seed S] [--output max_value.png]  (+ .csv)
//   max_value sets    --output OUT.safetensors [--seed S] [--sets 8]   (x [B, 50, 2] for predict)
//   max_value quantize --checkpoint PATH --output Q.safetensors [--seed S] [--sets 1000]
//                     (either model in int8; eval, predict and plot take Q.safetensors)
//   max_value info    [--model pointer|set]   (the memory plan of a forward-only pass)
//
// Checkpoints are safetensors files under SPEC's names; `train` adds the optimiser and
// generator state, and every command also accepts a file that holds only the parameters
// (for instance exported from PyTorch): the model is recognised by its tensors.
//
// Faults (stformer/train/training.hpp): a non-finite loss or gradient stops training with a message
// naming the iteration and the tensor, and saves nothing; SIGINT/SIGTERM end the iteration
// under way, write the checkpoint (which --resume continues bit for bit) and exit with 128 +
// the signal; checkpoints are replaced atomically, so a kill never leaves a broken one.
#include <CLI/CLI.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <stformer/io/gnuplot.hpp>

#include "../checks.hpp"
#include "max_value.hpp"

using namespace max_value;

namespace {

// Generators: parameters use (seed, 0), training sets (seed, 1), evaluation sets (seed, 2).
Rng eval_rng(std::uint64_t seed) { return Rng(seed, 2); }

void print_metrics(const char* model, const Metrics& m) {
  if (std::strcmp(model, "pointer") == 0)
    std::printf("test on %zu fresh sets: accuracy %.1f%% (mean distance to the true point %.4f)\n", m.sets, 100 * m.accuracy, m.distance);
  else
    std::printf("test on %zu fresh sets: mean distance %.4f, nearest-point hits %.1f%%\n", m.sets, m.distance, 100 * m.accuracy);
}

// The training configuration, kept in a checkpoint's metadata so that --resume goes on with it.
std::map<std::string, std::string> run_metadata(const char* model, const TrainOptions& o) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.9g", double(o.lr));  // 9 digits: the same float when read back
  return {{"model", model},
          {"seed", std::to_string(o.seed)},
          {"iterations", std::to_string(o.iterations)},
          {"lr", lr},
          {"fresh", std::to_string(o.fresh)},
          {"schedule", std::to_string(o.schedule)},
          {"lanes", std::to_string(o.lanes)}};
}

// The configuration of a checkpoint written by train (run_metadata's keys, resolved to SPEC's
// defaults when it was written), each value refused, naming the key, unless the command line
// would take it.
TrainOptions resumed_options(const safetensors::File& f, TrainOptions o) {
  const auto value = [&](const char* key) {
    auto it = f.metadata().find(key);
    if (it == f.metadata().end())
      throw std::runtime_error("checkpoint " + f.label() + ": no \"" + key + "\" in its metadata: not written by max_value train");
    return it->second;
  };
  const auto whole = [&](const char* key, const std::string& s, std::uint64_t lo, std::uint64_t hi) {
    const auto v = whole_number(s);
    if (!v || *v < lo || *v > hi)
      throw std::runtime_error("checkpoint " + f.label() + ": its metadata \"" + key + "\" is \"" + s + "\", not a whole number from " +
                               std::to_string(lo) + " to " + std::to_string(hi));
    return *v;
  };
  o.seed = whole("seed", value("seed"), 0, UINT64_MAX);
  o.iterations = int(whole("iterations", value("iterations"), 1, 10000000));
  const std::string lr = value("lr");
  if (const double v = ::detail::number(lr); !std::isfinite(v) || !(float(v) > 0) || !std::isfinite(float(v)))
    throw std::runtime_error("checkpoint " + f.label() + ": its metadata \"lr\" is \"" + lr + "\", not a number above 0");
  o.lr = std::stof(lr);
  o.fresh = int(whole("fresh", value("fresh"), 0, 1));
  o.schedule = int(whole("schedule", value("schedule"), Schedule::constant, Schedule::cosine));
  // written since the lane count became a choice; every run before it had 2 lanes
  const auto lanes = f.metadata().find("lanes");
  o.lanes = lanes == f.metadata().end() ? 2 : size_t(whole("lanes", lanes->second, 1, Run<PointerNet>::Chunks));
  return o;
}

// Trains (from the checkpoint `resume` when given), evaluates, saves. SIGINT/SIGTERM: the
// iteration under way ends, the checkpoint is written, and the exit code is 128 + signal.
template <class Net>
int train(TrainOptions o, const std::string& checkpoint, const safetensors::File* resume) {
  using T = Task<Net>;
  o = with_defaults<Net>(resume ? resumed_options(*resume, o) : o);  // written out in the checkpoint
  Run<Net> run(o.seed, o.threads, o.lanes);
  if (resume) {
    load_checkpoint(*resume, *run.model, *run.opt, run.state);
    if (const std::string problem = resumed_state_problem(resume->label(), run.state.step, run.opt->steps, o.iterations, "the run's iterations");
        !problem.empty())
      throw std::runtime_error(problem);
    std::printf("resumed from %s at iteration %lld\n", resume->label().c_str(), (long long)run.state.step);
  }
  std::printf("training %s (%zu parameters) for %d iterations, seed %llu%s; %zu lanes on %zu threads\n", T::name, param_count(*run.model),
              o.iterations, (unsigned long long)o.seed, o.fresh ? ", fresh sets every iteration" : "", o.lanes, run.pool.size());
  std::int64_t saved = resume && resume->label() == checkpoint ? run.state.step : -1;
  const auto save = [&] {
    if (!checkpoint.empty()) save_checkpoint(checkpoint, *run.model, *run.opt, run.state, run_metadata(T::name, o)), saved = run.state.step;
  };
  const std::int64_t first = run.state.step;
  auto start = std::chrono::steady_clock::now();
  stop_on_signals();
  try {
    run.train(
        o,
        [&](int it, float loss, double rate, double eta) {
          if (!o.quiet) std::printf("  iteration %5d  loss %.4f  %6.1f it/s  ETA %4.0f s\n", it, loss, rate, eta);
          std::fflush(stdout);
        },
        save, &stop_signal());
  } catch (const NonFiniteError& e) {
    throw NonFiniteError(e.what() + stopped_by_numbers(checkpoint, saved, "iteration"));
  }
  if (const int sig = stop_signal()) {
    save();
    std::printf("%s\n", stopped_by_signal(sig, run.state.step, checkpoint, "iteration").c_str());
    return 128 + sig;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (run.state.step > first) std::printf("%.1f ms per iteration\n", 1000 * seconds / double(run.state.step - first));
  Rng rng = eval_rng(o.seed);
  print_metrics(T::name, run.evaluate(rng, 1000));
  if (!checkpoint.empty()) {
    save();
    std::printf("checkpoint: %s\n", checkpoint.c_str());
  }
  return 0;
}

// Forward-only passes give the same outputs on any number of lanes: one per thread.
size_t forward_lanes(size_t threads) { return std::min(threads, Run<PointerNet>::Chunks); }

// Which model a checkpoint holds, "pointer" or "set": its metadata's "model", or else the model
// whose parameters it holds (float32, or int8 when `quantized`).
std::string model_kind(const safetensors::File& file, bool quantized) {
  if (auto it = file.metadata().find("model"); it != file.metadata().end()) {
    if (it->second != "pointer" && it->second != "set")
      throw std::runtime_error("checkpoint " + file.label() + ": unknown model '" + it->second + "' (expected pointer or set)");
    return it->second;
  }
  std::string problems;
  const auto fits = [&](auto&& model, const char* name) {
    try {
      check_params(file, *model);
      return true;
    } catch (const std::runtime_error& e) {
      problems += std::string(problems.empty() ? "" : "; ") + "as the " + name + " model: " + e.what();
      return false;
    }
  };
  if (quantized ? fits(std::make_unique<QPointerNet>(), "int8 pointer") : fits(std::make_unique<PointerNet>(), "pointer")) return "pointer";
  if (quantized ? fits(std::make_unique<QSetNet>(), "int8 set") : fits(std::make_unique<SetNet>(), "set")) return "set";
  throw std::runtime_error("checkpoint " + file.label() + " holds neither model's parameters (" + problems + ")");
}

// Loads whichever model the checkpoint holds, float32 or int8, and calls f(run, name).
template <class F>
int with_checkpoint(const std::string& path, size_t threads, F&& f) {
  auto file = safetensors::File::read(path);
  const bool quantized = int8_checkpoint(file);
  const auto run_with = [&]<class Net>(const char* kind) {
    auto run = std::make_unique<Run<Net>>(0, threads, forward_lanes(threads));
    if (quantized) {
      run->quantized = std::make_unique<Quantized<Net>>();
      load_quantized(file, *run->quantized);
    } else {
      load_params(file, *run->model);
    }
    std::printf("%s: %s model, %s\n", path.c_str(), kind, quantized ? "int8 (integer forward pass, quantized checkpoint)" : "float32");
    return f(*run, kind);
  };
  return model_kind(file, quantized) == "pointer" ? run_with.template operator()<PointerNet>("pointer") : run_with.template operator()<SetNet>("set");
}

// quantize: the model of a float checkpoint into int8 (max_value::quantize: ranges over the
// training sets of its seed), saved, then both evaluated on the same fresh sets.
template <class Net>
int quantize_checkpoint(const safetensors::File& file, const std::string& output, std::uint64_t eval_seed, size_t sets, size_t threads) {
  using T = Task<Net>;
  auto run = std::make_unique<Run<Net>>(0, threads, forward_lanes(threads));
  load_params(file, *run->model);  // a training checkpoint's optimiser and run state (optim.*, state.*) are passed over
  std::uint64_t seed = 0;
  if (auto it = file.metadata().find("seed"); it != file.metadata().end()) {
    const auto v = whole_number(it->second);
    if (!v) throw std::runtime_error("checkpoint " + file.label() + ": its metadata \"seed\" is \"" + it->second + "\": " + seed_problem(it->second));
    seed = *v;
  }
  auto start = std::chrono::steady_clock::now();
  run->quantized = quantize(*run->model, seed);
  const double ms = 1000 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  save_params(output, *run->quantized, {{"model", T::name}, {"precision", "int8"}, {"calibration", "500 training sets of seed " + std::to_string(seed)}});
  size_t bytes = 0;  // of the whole quantized model: weights, biases, scales, multipliers
  for_each_param([&](const Path&, Init, const auto& t) { bytes += t.size() * sizeof(*t.data()); }, std::as_const(*run->quantized));
  std::printf("quantized %s (%s model) in %.0f ms, calibrated on the 500 training sets of seed %llu: %zu B of tensors (float32: %zu B)\n",
              file.label().c_str(), T::name, ms, (unsigned long long)seed, bytes, param_count(*run->model) * sizeof(float));
  // both models on the same sets
  Rng rng = eval_rng(eval_seed);
  Metrics mf, mq;
  size_t same = 0;
  double apart = 0;  // the int8 prediction's distance from the float one (set)
  auto ref = std::make_unique<typename T::template Out<Batch>>();
  for (size_t done = 0; done < sets; done += Batch) {
    run->sets->draw(rng);
    *ref = run->infer(true);
    const auto& yq = run->infer();
    for (size_t b = 0; b < Batch && done + b < sets; ++b) {
      const Prediction pf = T::predict(*ref, *run->sets, b), pq = T::predict(yq, *run->sets, b);
      mf.add(pf, *run->sets, b), mq.add(pq, *run->sets, b);
      same += pf.index == pq.index;
      apart += std::hypot(pf.px - pq.px, pf.py - pq.py);
    }
  }
  mf.mean(), mq.mean();
  const size_t n = mf.sets;
  if constexpr (Run<Net>::pointer)
    std::printf("test on %zu fresh sets (seed %llu): accuracy float32 %.1f%%, int8 %.1f%%; the same choice on %.1f%% of sets\n", n,
                (unsigned long long)eval_seed, 100 * mf.accuracy, 100 * mq.accuracy, 100.0 * double(same) / double(n));
  else
    std::printf("test on %zu fresh sets (seed %llu): mean distance float32 %.4f, int8 %.4f (%+.1f%%); nearest-point hits float32 %.1f%%, "
                "int8 %.1f%%; the same nearest point on %.1f%% of sets; int8 predictions %.4f from the float ones on average\n",
                n, (unsigned long long)eval_seed, mf.distance, mq.distance, 100 * (mq.distance / mf.distance - 1), 100 * mf.accuracy,
                100 * mq.accuracy, 100.0 * double(same) / double(n), apart / double(n));
  std::printf("quantized checkpoint: %s\n", output.c_str());
  return 0;
}

int quantize_checkpoint(const std::string& path, const std::string& output, std::uint64_t eval_seed, size_t sets, size_t threads) {
  auto file = safetensors::File::read(path);
  if (int8_checkpoint(file)) throw std::runtime_error("checkpoint " + path + " is already quantized");
  return model_kind(file, false) == "pointer" ? quantize_checkpoint<PointerNet>(file, output, eval_seed, sets, threads)
                                              : quantize_checkpoint<SetNet>(file, output, eval_seed, sets, threads);
}

// predict: x [B, 50, 2] in, log_probs [B, 50] (pointer) or y [B, 2] (set) out; an int8 model
// also writes its quantized input x_q [B, 50, 2] (I16) and its integer output: the pointer
// model's logits [B, 50] (I32), the set model's y_q [B, 2] (I16).
template <class Net>
int predict(Run<Net>& run, const char* kind, const std::string& input, const std::string& output) {
  auto in = safetensors::File::read(input);
  const auto* x = in.find("x");
  if (x == nullptr) throw std::runtime_error("input " + input + ": no tensor 'x'");
  if (x->dtype != safetensors::Dtype::F32 || x->shape.size() != 3 || x->shape[1] != N || x->shape[2] != 2)
    throw std::runtime_error("input " + input + ": 'x' must be F32 [B, 50, 2], it is " + std::string(dtype_name(x->dtype)) + " " +
                             safetensors::shape_string(x->shape));
  size_t count = x->shape[0];
  bool pointer = std::strcmp(kind, "pointer") == 0;
  size_t width = pointer ? N : 2;
  std::vector<float> points(count * N * 2), out(count * width);
  std::memcpy(points.data(), x->bytes.data(), x->bytes.size());
  for (float v : points)
    if (!std::isfinite(v)) throw std::runtime_error("input " + input + ": 'x' holds a value that is not finite");
  for (size_t done = 0; done < count; done += Batch) {
    size_t n = std::min(Batch, count - done);
    run.sets->x.fill(0.0f);
    std::memcpy(run.sets->x.data(), points.data() + done * N * 2, n * N * 2 * sizeof(float));
    const auto& y = run.infer();
    std::copy_n(y.data(), n * width, out.data() + done * width);
  }
  safetensors::Writer w;
  w.set_metadata("model", kind);
  w.add(pointer ? "log_probs" : "y", safetensors::Dtype::F32, {count, width}, std::as_bytes(std::span(out)));
  if (run.quantized) {  // the int8 model's own integers: its quantized input and its output
    using Q = typename Run<Net>::Quantized;
    auto pass = std::make_unique<InferOf<Q, 1, N>>();
    using Y = typename Q::template OutputAt<1, N, Q::steps - 2>;  // the last integer step's: logits I32 [1, 1, 50] or y_q I16 [1, 1, 2]
    std::vector<std::int16_t> x_q(count * N * 2);
    std::vector<typename Y::value_type> y_q(count * width);
    Tensor<1, N, 2> set;
    for (size_t b = 0; b < count; ++b) {
      std::copy_n(points.data() + b * N * 2, N * 2, set.data());
      const auto& xq = pass->template forward_steps<0, 1>(*run.quantized, set);  // the input's quantization
      std::copy(xq.begin(), xq.end(), x_q.begin() + b * N * 2);
      const auto& y = pass->template forward_steps<1, Q::steps - 1>(*run.quantized);  // then integers only
      std::copy(y.begin(), y.end(), y_q.begin() + b * width);
    }
    const char* name = pointer ? "logits" : "y_q";
    w.add("x_q", safetensors::Dtype::I16, {count, N, 2}, std::as_bytes(std::span(x_q)));
    w.add(name, stformer::detail::dtype_of<Y>(), {count, width}, std::as_bytes(std::span(y_q)));
    w.set_metadata("precision", "int8");
    const double unit = run.quantized->template get<Q::steps - 1>().scale(0);
    std::printf("%s: x_q [%zu, %zu, 2] (I16), %s [%zu, %zu] (%s, one unit = %.9g)\n", output.c_str(), count, N, name, count, width,
                std::string(safetensors::dtype_name(stformer::detail::dtype_of<Y>())).c_str(), unit);
  }
  w.write(output);
  std::printf("%s: %s [%zu, %zu]\n", output.c_str(), pointer ? "log_probs" : "y", count, width);
  return 0;
}

// plot: six fresh sets, grey points, the true largest-norm point in blue, the prediction in
// green when right and red when wrong; PNG through gnuplot and the same data as CSV.
template <class Net>
int plot(Run<Net>& run, const char* kind, std::uint64_t seed, const std::string& png) {
  Rng rng = eval_rng(seed);
  run.sets->draw(rng);
  run.infer();
  std::string csv = png.substr(0, png.rfind('.')) + ".csv";
  std::ofstream table(csv);
  table << "set,x,y,role\n";
  std::ostringstream script;
  script << "set terminal pngcairo size 1200,800\nset output '" << png << "'\nset multiplot layout 2,3 title 'max value, "
         << kind << " model: true largest-norm point (blue), prediction (green right, red wrong)'\n"
         << "unset key\nset size ratio -1\n";
  size_t right = 0;
  for (size_t b = 0; b < 6; ++b) {
    Prediction p = Task<Net>::predict(*run.out, *run.sets, b);
    bool ok = p.index == size_t(run.sets->target(b));
    right += ok;
    for (size_t i = 0; i < N; ++i) table << b << ',' << run.sets->x(b, i, 0) << ',' << run.sets->x(b, i, 1) << ",point\n";
    table << b << ',' << run.sets->point(b, 0, 0) << ',' << run.sets->point(b, 0, 1) << ",true\n";
    table << b << ',' << p.px << ',' << p.py << (ok ? ",right\n" : ",wrong\n");
    script << "set title 'set " << b + 1 << (ok ? ": right" : ": wrong") << "'\nplot '-' with points pt 7 ps 0.8 lc rgb '#999999', "
           << "'-' with points pt 7 ps 2.2 lc rgb '#1f4fd8', '-' with points pt 7 ps 1.2 lc rgb '" << (ok ? "#1a9641" : "#d7191c") << "'\n";
    for (size_t i = 0; i < N; ++i) script << run.sets->x(b, i, 0) << ' ' << run.sets->x(b, i, 1) << '\n';
    script << "e\n" << run.sets->point(b, 0, 0) << ' ' << run.sets->point(b, 0, 1) << "\ne\n" << p.px << ' ' << p.py << "\ne\n";
  }
  script << "unset multiplot\n";
  if (!table) throw std::runtime_error("cannot write " + csv);
  gnuplot(script.str());
  std::printf("%s (%zu of 6 right), %s\n", png.c_str(), right, csv.c_str());
  return 0;
}

// info: the model's parameters and the memory of a forward-only pass over one set, step by
// step (sizeof(InferOf<Net, 1, 50>) is the whole of it: one arena, stformer/compose/sequential.hpp).
template <class Net>
int info(const char* kind) {
  using I = InferOf<Net, 1, N>;
  auto model = std::make_unique<Net>();
  std::printf("%s model: %zu parameters, sizeof(model) = %zu B\n", kind, param_count(*model), sizeof(Net));
  std::printf("forward-only pass over one set of %zu points: sizeof(InferOf<Net, 1, %zu>) = %zu B, one arena:\n", N, N, sizeof(I));
  write_plan<I>(stdout);
  std::printf("(training activations for the same set: sizeof(ActsOf<Net, 1, %zu>) = %zu B)\n", N, sizeof(ActsOf<Net, 1, N>));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"max_value: SPEC Example 1 (find the largest-norm point of a 2-D set) with stformer"};
  app.require_subcommand(1);

  TrainOptions o;
  std::string model = "pointer", checkpoint, input, output, png = "max_value.png", resume;
  bool fresh = false;
  std::string schedule;
  size_t sets = 1000, written_sets = 8;  // eval's and sets' --sets

  auto* train_cmd = app.add_subcommand("train", "train a model, evaluate it on 1,000 fresh sets, save a checkpoint");
  train_cmd->add_option("--model", model, "pointer (2022) or set (2019)")->check(CLI::IsMember({"pointer", "set"}))->capture_default_str();
  train_cmd->add_option("--seed", o.seed, "seed of every generator")->check(Seed)->capture_default_str();
  train_cmd->add_option("--iterations", o.iterations, "iterations (default: SPEC's, 300 pointer / 2000 set)")->check(Whole(1, 10000000));
  train_cmd->add_option("--lr", o.lr, "learning rate (default: SPEC's, 0.01 pointer / 1e-3 set)")->check(Positive);
  train_cmd->add_option("--schedule", schedule, "learning-rate schedule: constant, or cosine to 0 over the run (default: SPEC's, cosine pointer / constant set)")
      ->check(CLI::IsMember({"constant", "cosine"}));
  train_cmd->add_flag("--fresh", fresh, "draw 500 new training sets every iteration (the set model always does)");
  train_cmd->add_option("--checkpoint", checkpoint, "where to save the trained model (safetensors)")->check(OutputPath);
  train_cmd->add_option("--report", o.report_every, "iterations between progress lines")->check(Whole(1, 1000000))->capture_default_str();
  train_cmd->add_option("--save-every", o.save_every, "iterations between checkpoints (0: only at the end)")->check(Whole(0, 10000000))->capture_default_str();
  auto* resume_opt = train_cmd->add_option("--resume", resume, "continue a run from its checkpoint, with its configuration")->check(InputFile);
  train_cmd->add_option("--lanes", o.lanes, "lanes the batch is split over (1 to 250): part of the run, like the seed; the threads share them")
      ->check(Whole(size_t{1}, Run<PointerNet>::Chunks))
      ->capture_default_str();
  for (const char* name : {"--model", "--seed", "--iterations", "--lr", "--schedule", "--fresh", "--lanes"}) resume_opt->excludes(train_cmd->get_option(name));

  auto* eval_cmd = app.add_subcommand("eval", "evaluate a checkpoint on fresh sets");
  eval_cmd->add_option("--checkpoint", checkpoint, "checkpoint (safetensors)")->required()->check(InputFile);
  eval_cmd->add_option("--seed", o.seed, "seed of the test sets")->check(Seed)->capture_default_str();
  eval_cmd->add_option("--sets", sets, "number of fresh sets")->check(Whole(size_t{1}, size_t{100000000}))->capture_default_str();

  auto* predict_cmd = app.add_subcommand("predict", "predict for sets x [B, 50, 2] read from a safetensors file");
  predict_cmd->add_option("--checkpoint", checkpoint, "checkpoint (safetensors)")->required()->check(InputFile);
  predict_cmd->add_option("--input", input, "safetensors file with x [B, 50, 2] (F32)")->required()->check(InputFile);
  predict_cmd->add_option("--output", output, "safetensors file for log_probs [B, 50] or y [B, 2]")->required()->check(OutputPath);

  auto* plot_cmd = app.add_subcommand("plot", "the seed project's figure for 6 fresh sets (PNG and CSV)");
  plot_cmd->add_option("--checkpoint", checkpoint, "checkpoint (safetensors)")->required()->check(InputFile);
  plot_cmd->add_option("--seed", o.seed, "seed of the sets")->check(Seed)->capture_default_str();
  plot_cmd->add_option("--output", png, "PNG file (the CSV goes next to it)")->check(OutputPath)->capture_default_str();

  auto* quantize_cmd = app.add_subcommand("quantize", "quantize a model to int8 (post-training), save it, compare it with the float model");
  quantize_cmd->add_option("--checkpoint", checkpoint, "float checkpoint of the pointer or set model (safetensors)")->required()->check(InputFile);
  quantize_cmd->add_option("--output", output, "the quantized checkpoint (safetensors)")->required()->check(OutputPath);
  quantize_cmd->add_option("--seed", o.seed, "seed of the test sets")->check(Seed)->capture_default_str();
  quantize_cmd->add_option("--sets", sets, "number of fresh test sets")->check(Whole(size_t{1}, size_t{100000000}))->capture_default_str();

  auto* sets_cmd = app.add_subcommand("sets", "write fresh sets x [B, 50, 2] (the input of predict) to a safetensors file");
  sets_cmd->add_option("--output", output, "safetensors file")->required()->check(OutputPath);
  sets_cmd->add_option("--seed", o.seed, "seed of the sets")->check(Seed)->capture_default_str();
  sets_cmd->add_option("--sets", written_sets, "number of sets")->check(Whole(size_t{1}, size_t{Batch}))->capture_default_str();

  auto* info_cmd = app.add_subcommand("info", "the model's size and the memory of a forward-only pass, phase by phase");
  info_cmd->add_option("--model", model, "pointer or set")->check(CLI::IsMember({"pointer", "set"}))->capture_default_str();

  o.threads = std::max<size_t>(std::thread::hardware_concurrency(), 1);
  for (auto* cmd : {train_cmd, eval_cmd, predict_cmd, plot_cmd, quantize_cmd})
    cmd->add_option("--threads", o.threads, "threads (default: this machine's cores; the results do not depend on it)")
        ->check(Whole(size_t{1}, size_t{1024}))
        ->capture_default_str();

  app.footer(exit_codes);
  for (auto* cmd : app.get_subcommands({})) cmd->footer(exit_codes);
  if (const auto code = parse(app, argc, argv, "max_value")) return *code;
  // an output over an input would destroy it (plot writes its CSV beside the PNG); the outputs
  // not named on the command line (plot's CSV, train --resume's own checkpoint) are checked as
  // --checkpoint and --output are
  const std::string csv = std::filesystem::path(png).replace_extension(".csv").string();
  std::vector<std::string> problems = {overwrites(output, {checkpoint, input})};
  if (*plot_cmd) problems.insert(problems.end(), {overwrites(png, {checkpoint}), overwrites(csv, {checkpoint}), output_problem(csv)});
  if (*train_cmd && !resume.empty() && checkpoint.empty())
    if (const std::string p = output_problem(resume); !p.empty()) problems.push_back("--resume " + resume + " is written over at the end: " + p);
  for (const std::string& problem : problems)
    if (!problem.empty()) {
      std::fprintf(stderr, "max_value: %s\n", problem.c_str());
      return 2;
    }
  try {
    if (*train_cmd) {
      if (fresh) o.fresh = 1;
      if (!schedule.empty()) o.schedule = schedule == "cosine" ? Schedule::cosine : Schedule::constant;
      if (!resume.empty()) {
        if (checkpoint.empty()) checkpoint = resume;
        const auto file = safetensors::File::read(resume);
        const auto kind = file.metadata().find("model");
        model = kind == file.metadata().end() ? "" : kind->second;
        if (model != "pointer" && model != "set")
          throw std::runtime_error("checkpoint " + resume + ": not a training checkpoint of max_value train (metadata \"model\" is not pointer or set)");
        return model == "pointer" ? train<PointerNet>(o, checkpoint, &file) : train<SetNet>(o, checkpoint, &file);
      }
      return model == "pointer" ? train<PointerNet>(o, checkpoint, nullptr) : train<SetNet>(o, checkpoint, nullptr);
    }
    if (*eval_cmd)
      return with_checkpoint(checkpoint, o.threads, [&](auto& run, const char* kind) {
        Rng rng = eval_rng(o.seed);
        print_metrics(kind, run.evaluate(rng, sets));
        return 0;
      });
    if (*quantize_cmd) return quantize_checkpoint(checkpoint, output, o.seed, sets, o.threads);
    if (*predict_cmd) return with_checkpoint(checkpoint, o.threads, [&](auto& run, const char* kind) { return predict(run, kind, input, output); });
    if (*sets_cmd) {
      Rng rng = eval_rng(o.seed);
      auto drawn = std::make_unique<Sets<Batch>>();
      drawn->draw(rng);
      safetensors::Writer w;
      w.add("x", safetensors::Dtype::F32, {written_sets, N, 2}, std::as_bytes(std::span(drawn->x.data(), written_sets * N * 2)));
      w.write(output);
      std::printf("%s: x [%zu, %zu, 2]\n", output.c_str(), written_sets, N);
      return 0;
    }
    if (*info_cmd) return model == "pointer" ? info<PointerNet>("pointer") : info<SetNet>("set");
    if (*plot_cmd) return with_checkpoint(checkpoint, o.threads, [&](auto& run, const char* kind) { return plot(run, kind, o.seed, png); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "max_value: %s\n", e.what());
    return 1;
  }
  return 0;
}
