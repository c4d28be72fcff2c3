// Defines a model and a function over it, for abi_guard.sh: built with one configuration and
// used from main.cpp built with another, the program must not link.
#include <stformer/stformer.hpp>

stformer::PointerModel<2, 16, 1, 64, 2> model;

size_t parameters(const stformer::PointerModel<2, 16, 1, 64, 2>& m) { return stformer::param_count(m); }
