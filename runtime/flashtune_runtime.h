/* runtime/flashtune_runtime.h: the C ABI of libflashtune_runtime.so, flashtune's tuned attention kernels for other
 * projects (issue 22). Given the best configs `flashtune export --format json` wrote (or the database itself), it picks
 * a config per stage for a shape by the export's lookup rule (same family, dtype and GPU; exact problem, else the nearest; entries of other
 * GPUs only when this GPU has none; an entry counts only where the family's constraints and the device allow its
 * config on this shape; when none does, the runtime's built-in untuned configs, which explain marks "untuned": on
 * sm_90a the TMA forward and fused wgmma backward for f16 / bf16 at head_dim 64 and 128 (causal windows at 64: the
 * windowed sweep), else mma.sync kernels),
 * compiles it with NVRTC once per process (the on-disk CUBIN cache makes a second
 * process start warm) and launches it on the caller's stream with the caller's device pointers.
 *
 * Contracts:
 * - Every function returns FT_OK (0) or an error code; the error's one-line message is ft_last_error() on the same
 *   thread until its next call. Nothing aborts; a CUDA fault inside a kernel surfaces at the caller's next sync.
 * - Tensors are device pointers of the current context's device, contiguous, (batch, heads, seq, head_dim) for
 *   q, k, v, o, dout, dq, dk, dv (q / o / dout / dq: heads_q heads, seq_q rows; k / v / dk / dv: heads_kv, seq_k);
 *   lse and delta are fp32 (batch, heads_q, seq_q), natural log; sinks and dsinks fp32 (heads_q). Element type:
 *   shape.dtype for the big tensors. The softmax scale is 1 / sqrt(head_dim).
 * - Every output (o, lse, dq, dk, dv, dsinks) is written in full: it need not be zeroed. Every size is >= 1 (an
 *   empty tensor is FT_ERR_ARGUMENT: skip the call). No lse gradient is taken (treat lse as a constant).
 * - `stream` is a CUstream / cudaStream_t (NULL: the legacy default stream). The runtime launches in the calling
 *   thread's current context (the CUDA runtime's and PyTorch's primary context of the current device); when none is
 *   current it makes device 0's primary context current.
 * - Workspace: `workspace` NULL lets the runtime use its own, allocated and zeroed on the first call of a shape and
 *   device and kept (calls on several streams at once must then each pass their own; make that first call before a
 *   CUDA graph capture, which cannot allocate). A caller's workspace holds at least ft_attention_workspace_bytes()
 *   bytes and is zeroed by the caller before its first use. Kernels that count in it across launches put their
 *   counters back as they found them; the rest (D, the fp32 dQ accumulator, partial sums) is scratch that a launch
 *   writes before it reads, and is left holding values. So one workspace serves one shape and pass (forward or
 *   backward); zero it again before it serves another, whose counters may sit where this one left values.
 * - Problems are looked up with the harness's input-drawing dims at their defaults (qk_range 1, sink_bias 0) and
 *   fp32 exact (tf32 0).
 * - Thread safe: one runtime may be called from many threads.
 */
#ifndef FLASHTUNE_RUNTIME_H
#define FLASHTUNE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FT_RUNTIME_ABI_VERSION 1

#if defined(__GNUC__)
#define FT_API __attribute__((visibility("default")))
#else
#define FT_API
#endif

enum ft_status {
  FT_OK = 0,
  FT_ERR_ARGUMENT = 1,   /* a NULL or malformed argument, an impossible shape */
  FT_ERR_NO_CONFIG = 2,  /* neither the config file nor the built-in fallbacks have a config that runs this shape */
  FT_ERR_CONFIGS = 3,    /* the config file could not be read or parsed */
  FT_ERR_COMPILE = 4,    /* NVRTC failed on a chosen config */
  FT_ERR_CUDA = 5,       /* no driver / GPU, or a driver call failed (launch, allocation) */
  FT_ERR_BUFFER = 6      /* the caller's buffer (workspace, text) is too small */
};

enum ft_dtype { FT_F32 = 0, FT_F16 = 1, FT_BF16 = 2 };

/* An attention problem (DESIGN.md "Attention conventions"). Masks: causal aligned bottom-right when seq_q != seq_k;
 * window W > 0: key j visible to query i only when j > i + seq_k - seq_q - W; sink_tokens: the first keys stay
 * visible through the window; learned_sinks 1: one learned logit per query head joins the softmax denominator. */
typedef struct ft_attn_shape {
  int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
  int32_t causal, window, sink_tokens, learned_sinks;
  int32_t dtype; /* enum ft_dtype */
} ft_attn_shape;

/* Device pointers (CUdeviceptr); 0 where a call does not use one. forward reads q, k, v (+ sinks) and writes o,
 * lse; backward reads q, k, v, o, lse, dout (+ sinks) and writes dq, dk, dv (+ dsinks with learned sinks). */
typedef struct ft_attn_tensors {
  uint64_t q, k, v, o, lse, dout, dq, dk, dv, sinks, dsinks;
} ft_attn_tensors;

typedef struct ft_runtime ft_runtime;

/* The ABI version this library was built with (FT_RUNTIME_ABI_VERSION). */
FT_API int ft_runtime_abi_version(void);
/* The message of this thread's last failed call ("" when none); valid until this thread's next call. */
FT_API const char* ft_last_error(void);

/* Loads `configs_path` (an export JSON, or a flashtune database read as its export would be; NULL:
 * $FLASHTUNE_CONFIGS). `cache_dir`: where CUBINs are kept between
 * processes (NULL: $FLASHTUNE_CACHE_DIR, else $XDG_CACHE_HOME/flashtune, else ~/.cache/flashtune; "" : none).
 * Needs no GPU. */
FT_API int ft_runtime_create(const char* configs_path, const char* cache_dir, ft_runtime** out);
FT_API void ft_runtime_destroy(ft_runtime* rt);

/* Runs the tuned forward / backward (every stage of the fastest complete way of the chosen configs) on `stream`.
 * The first call of a shape picks, compiles and loads (milliseconds to seconds); later calls only launch. */
FT_API int ft_attention_forward(ft_runtime* rt, const ft_attn_shape* shape, const ft_attn_tensors* t, void* stream,
                         void* workspace, size_t workspace_bytes);
FT_API int ft_attention_backward(ft_runtime* rt, const ft_attn_shape* shape, const ft_attn_tensors* t, void* stream,
                          void* workspace, size_t workspace_bytes);

/* [bytes] of workspace a forward (backward = 0) or backward (1) of `shape` needs on the current device. */
FT_API int ft_attention_workspace_bytes(ft_runtime* rt, const ft_attn_shape* shape, int backward, size_t* bytes);

/* What the runtime chose for `shape` on the current device (arch NULL) or, without a GPU, for `arch` ("sm_90a":
 * chosen among every GPU's entries and compiled, never launched): JSON text {"gpu" (null without one), "arch",
 * "pass": "forward" | "backward", "problem" (key string), "workspace_bytes", "way": [family...], "passed_over": [the
 * backward's other ways, each with its summed medians or why it cannot run], "stages": [{"family", "config" (key
 * string "block_m=64,..."), "tuned_problem" (key string), "tuned_gpu", "untuned" (a built-in fallback), "exact", "distance", "median_ms" (as tuned),
 * "compile": {"ok", "cache_hit", "registers", "spill_bytes", "compile_ms"}}]}. Written to `buf` (NUL-terminated) when
 * it fits in `len` bytes; `*needed` (may be NULL) gets the size with the NUL. FT_ERR_BUFFER when it does not fit. */
FT_API int ft_attention_explain(ft_runtime* rt, const ft_attn_shape* shape, int backward, const char* arch, char* buf,
                         size_t len, size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTUNE_RUNTIME_H */
