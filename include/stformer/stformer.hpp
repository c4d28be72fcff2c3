// stformer — attention models whose shapes live in the type system. Umbrella header, layer by
// layer; the headers that need stformer_io (io/'s files but param_table.hpp, and
// quantized/checkpoint.hpp), threads (train/parallel.hpp) or a host (codegen/'s generators,
// train/training.hpp) are included by name.
#pragma once

#include "core/params.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

#include "compose/sequential.hpp"
#include "compose/combinators.hpp"
#include "compose/decode.hpp"

#include "blocks/activation.hpp"
#include "blocks/attention.hpp"
#include "blocks/decoder.hpp"
#include "blocks/embedding.hpp"
#include "blocks/encoder.hpp"
#include "blocks/form.hpp"
#include "blocks/feedforward.hpp"
#include "blocks/isab.hpp"
#include "blocks/layernorm.hpp"
#include "blocks/layerscale.hpp"
#include "blocks/linear.hpp"
#include "blocks/mab.hpp"
#include "blocks/meanpool.hpp"
#include "blocks/patchify.hpp"
#include "blocks/pma.hpp"
#include "blocks/pointer.hpp"
#include "blocks/rotary_attention.hpp"
#include "blocks/positional.hpp"
#include "blocks/sab.hpp"
#include "blocks/self_attention.hpp"
#include "blocks/tokens.hpp"
#include "blocks/scalenorm.hpp"

#include "models/language_model.hpp"
#include "models/pointer_model.hpp"
#include "models/set_transformer.hpp"

#include "quantized/quantize.hpp"
#include "quantized/memory.hpp"

#include "train/loss.hpp"
#include "train/optim.hpp"

#include "io/param_table.hpp"

#include "codegen/model_image.hpp"
