// A model that is not SPEC's, for the generated C API's test (c_api_any.sh): a sequence
// classifier of 8 tokens of a vocabulary of 11, declared at global scope as a user's header would.
#pragma once

#include <stformer/stformer.hpp>

using SeqClassifier = stformer::Sequential<stformer::Named<"embedding", stformer::Embedding<11, 16>>, stformer::PositionalEncoding<8, 16>,
                                           stformer::Named<"blocks", stformer::Repeat<stformer::EncoderBlock<16, 2, 32>, 2>>,
                                           stformer::MeanPool<16>, stformer::Named<"head", stformer::Linear<16, 3>>>;
