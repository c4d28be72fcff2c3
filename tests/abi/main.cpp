// Uses the model that model.cpp defines (see abi_guard.sh).
#include <cstdio>

#include <stformer/stformer.hpp>

extern stformer::PointerModel<2, 16, 1, 64, 2> model;
size_t parameters(const stformer::PointerModel<2, 16, 1, 64, 2>& m);

int main() {
  std::printf("%zu parameters, %zu bytes\n", parameters(model), sizeof model);
  return parameters(model) == 7046 ? 0 : 1;
}
