// wikitext_lm's causal model (`--model gpt`): lm::WikiGpt (tasks/byte_gpt.hpp), a GPT over the
// text's bytes, trained, evaluated, quantized and generating through its key/value cache
// (DecodeOf). Its checkpoints say so (metadata "model": "wikitext_lm_gpt"; tensor wte.weight),
// so eval, generate and quantize take them without the flag.
#pragma once

#include <cstdint>
#include <string>

#include <stformer/io/safetensors.hpp>

namespace gpt {

// Whether f holds the GPT (float, or in integers: integer_model).
bool is_gpt(const stformer::safetensors::File& f);

// Trains for `steps` optimiser steps, or `minutes` (> 0) with the schedule fitted after warm-up;
// validation bits a byte on the first eval_bytes of the validation text every eval_every steps.
int train(const std::string& data, std::int64_t steps, double minutes, std::uint64_t seed, size_t threads, float lr,
          const std::string& checkpoint, std::int64_t eval_every, size_t eval_bytes);
// Bits a byte and the word-level perplexity (e^(the text's NLL / its tokens)) of a split.
int eval(const std::string& checkpoint, const std::string& data, const std::string& split, size_t threads);
// `bytes` bytes sampled after the prompt, through the cache (sliding by half its length when full).
int generate(const std::string& checkpoint, const std::string& prompt, size_t bytes, double temperature, size_t top_k, std::uint64_t seed);
// The whole model in integers, calibrated on 1,024 windows of the training text.
int quantize(const std::string& checkpoint, const std::string& output, const std::string& data);

}  // namespace gpt
