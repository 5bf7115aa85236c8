// kernel_templates/attn_fwd.cuh: fused attention forward (the attn_fwd family). Being written.
#pragma once

#include "attn_common.cuh"
#include "attn_fwd_f32.cuh"
