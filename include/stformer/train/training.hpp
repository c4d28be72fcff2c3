// stformer — what the training programs (targets/) do about faults, in one place:
//
// - Bad numbers: check_finite(step, loss, norm, grad) throws NonFiniteError naming the step
//   (1-based, as the progress lines count) and the tensor, e.g.
//     step 12: the gradient of 'blocks.0.attn.wq.weight' is not finite (element 37 is nan)
//   before the optimiser uses the gradient, so the parameters stay those of the last good
//   step and nothing is saved over the last checkpoint.
// - Interruption: after stop_on_signals(), the first SIGINT or SIGTERM sets stop_signal();
//   the training loops finish the step under way, write their checkpoint and exit with
//   128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM). The handler is reset by the
//   first signal, so a second one ends the process at once. Checkpoints are written to a
//   temporary file, synced, then renamed (safetensors::Writer::write): a process killed at
//   any moment, even by SIGKILL, leaves the previous checkpoint whole.
#pragma once

#include "../core/config.hpp"

#include <cmath>
#include <csignal>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <stformer/core/params.hpp>

namespace stformer::inline STFORMER_ABI {

struct NonFiniteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// loss: the step's loss; norm: the gradient's global L2 norm (grad_norm); grad: the gradient.
template <class M>
void check_finite(std::int64_t step, double loss, float norm, const M& grad) {
  const std::string at = "step " + std::to_string(step) + ": ";
  if (!std::isfinite(loss)) throw NonFiniteError(at + "the loss is not finite (" + std::to_string(loss) + ")");
  if (std::isfinite(norm)) return;
  const NonFinite bad = first_nonfinite(grad);
  if (!bad) throw NonFiniteError(at + "the gradient's norm overflows a float (every element is finite)");
  throw NonFiniteError(at + "the gradient of '" + bad.name.c_str() + "' is not finite (element " + std::to_string(bad.index) + " is " +
                       std::to_string(bad.value) + ")");
}

// What the programs add to a NonFiniteError's message, and print when a signal stopped them;
// `saved`: the step of the checkpoint written last (-1: none), `unit`: "step" or "iteration".
inline std::string stopped_by_numbers(const std::string& checkpoint, std::int64_t saved, const char* unit) {
  if (checkpoint.empty()) return "; training stopped";
  if (saved < 0) return "; training stopped, nothing saved";
  return "; training stopped, the checkpoint " + checkpoint + " of " + unit + " " + std::to_string(saved) + " is unchanged";
}
inline std::string stopped_by_signal(int signal, std::int64_t step, const std::string& checkpoint, const char* unit) {
  return "stopped by signal " + std::to_string(signal) + " at " + unit + " " + std::to_string(step) +
         (checkpoint.empty() ? " (no --checkpoint: nothing saved)" : ": checkpoint " + checkpoint + ", continue with --resume");
}

inline volatile std::sig_atomic_t& stop_signal() {
  static volatile std::sig_atomic_t signal = 0;
  return signal;
}

inline void stop_on_signals() {
  struct sigaction action {};
  action.sa_handler = [](int s) { stop_signal() = s; };
  action.sa_flags = SA_RESETHAND;  // a second signal: the default action
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace stformer
