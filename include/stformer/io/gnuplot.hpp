// stformer — figures through gnuplot (Debian's gnuplot-nox), driven over a pipe.
// (Debian 12's libsciplot-dev is the SciPlot Motif widget, not the sciplot C++ library, which
// Debian does not ship; the examples write their figures with a gnuplot script instead.)
#pragma once

#include "../core/config.hpp"

#include <string>

namespace stformer::inline STFORMER_ABI {

// Runs gnuplot on script; throws std::runtime_error when gnuplot is missing or fails.
void gnuplot(const std::string& script);

}  // namespace stformer
