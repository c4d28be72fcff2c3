// A causal language model for the generated C API's test (c_api_any.sh): 8 tokens of a
// vocabulary of 11 give the next token's logits at every position, [1, 8, 11], row i from tokens
// 0 .. i alone. Its type declares so (causal = true): stformer-c-api refuses it without --causal,
// and its C API applies the causal mask in every call. Its blocks are GPT-J's parallel blocks,
// declared from combinators (user_blocks.hpp): their C API, float and int8, comes from the
// declaration alone.
#pragma once

#include <stformer/stformer.hpp>

#include "user_blocks.hpp"

struct CausalLM : stformer::Sequential<stformer::Named<"embedding", stformer::Embedding<11, 16>>, stformer::PositionalEncoding<8, 16>,
                                       stformer::Named<"blocks", stformer::Repeat<user::ParallelBlock<16, 2, 32>, 2>>,
                                       stformer::Named<"head", stformer::Linear<16, 11>>> {
  static constexpr bool causal = true;
};

// The same model in its inference form, as llama2.c writes it: the head over the last row alone
// ([1, 1, 11], the next token's logits after the 8), the same parameters by name.
struct CausalLast : stformer::Sequential<stformer::Named<"embedding", stformer::Embedding<11, 16>>, stformer::PositionalEncoding<8, 16>,
                                         stformer::Named<"blocks", stformer::Repeat<user::ParallelBlock<16, 2, 32>, 2>>, stformer::LastToken<16>,
                                         stformer::Named<"head", stformer::Linear<16, 11>>> {
  static constexpr bool causal = true;
};
