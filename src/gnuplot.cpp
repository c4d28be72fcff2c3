#include <stformer/io/gnuplot.hpp>

#include <cstdio>
#include <stdexcept>

#include <sys/wait.h>

namespace stformer::inline STFORMER_ABI {

void gnuplot(const std::string& script) {
  FILE* pipe = popen("gnuplot 2>&1", "w");
  if (pipe == nullptr) throw std::runtime_error("cannot start gnuplot (apt-get install gnuplot-nox)");
  bool written = std::fwrite(script.data(), 1, script.size(), pipe) == script.size();
  int status = pclose(pipe);
  if (!written || status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "gnuplot is not installed (apt-get install gnuplot-nox)"
                                                                             : "gnuplot failed on the figure's script");
}

}  // namespace stformer
